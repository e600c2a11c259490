package api

// CoordinatorStats describe one transaction coordinator.
type CoordinatorStats struct {
	State          string `json:"state"`
	LeastSigBits   uint64 `json:"leastSigBits"`
	LowWaterMark   uint64 `json:"lowWaterMark"`
	OngoingTxnSize int    `json:"ongoingTxnSize"`
}

// TxnInBufferStats is a transaction as a topic's buffer sees it.
type TxnInBufferStats struct {
	StartPosition *string `json:"startPosition"`
	Aborted       bool    `json:"aborted"`
}

// TxnInPendingAckStats is a transaction as a subscription's pending acks see it.
type TxnInPendingAckStats struct {
	CumulativeAckPosition *string `json:"cumulativeAckPosition"`
}

// TxnMetadata describes a transaction (keys as the client sent the names).
type TxnMetadata struct {
	TxnID              string                                     `json:"txnId"`
	Status             string                                     `json:"status"`
	OpenTimestamp      int64                                      `json:"openTimestamp"`
	TimeoutAt          int64                                      `json:"timeoutAt"`
	Owner              string                                     `json:"owner,omitempty"`
	ProducedPartitions map[string]TxnInBufferStats                `json:"producedPartitions"`
	AckedPartitions    map[string]map[string]TxnInPendingAckStats `json:"ackedPartitions"`
}

// TxnBufferStats describe a topic's transaction buffer.
type TxnBufferStats struct {
	State           string  `json:"state"`
	MaxReadPosition *string `json:"maxReadPosition"`
	LastStored      string  `json:"lastStoredPosition"`
	Watermark       string  `json:"watermark"`
	OngoingTxnSize  int     `json:"ongoingTxnSize"`
	AbortedTxnSize  int     `json:"abortedTxnSize"`
	HeldSends       int     `json:"heldSends"`
	// MaxReadPositionLag counts the stored entries readers may not read yet (from the max
	// read position on).
	MaxReadPositionLag int64 `json:"maxReadPositionLag"`
}

// PendingAckStats describe a subscription's pending acknowledgements.
type PendingAckStats struct {
	State           string         `json:"state"`
	Error           string         `json:"error,omitempty"`
	LowWaterMarks   map[string]int `json:"lowWaterMarks"`
	OngoingTxnSize  int            `json:"ongoingTxnSize"`
	LockedPositions int            `json:"lockedPositions"`
	ReplayFailures  int            `json:"replayFailures"`
}
