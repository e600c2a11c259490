package api

// The statistics below are JSON-compatible with Pulsar's admin v2 responses
// (TopicStatsImpl, PersistentTopicInternalStats): field names and JSON keys follow
// pulsar-client-go's pulsaradmin utils package, so an admin handler can encode them as they
// are. Rates are per second, averaged over the last rate interval (about 10 s).

// TopicStats is a topic's statistics (GET .../stats).
type TopicStats struct {
	MsgRateIn        float64 `json:"msgRateIn"`
	MsgThroughputIn  float64 `json:"msgThroughputIn"`
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	BytesInCounter   int64   `json:"bytesInCounter"`
	MsgInCounter     int64   `json:"msgInCounter"`
	BytesOutCounter  int64   `json:"bytesOutCounter"`
	MsgOutCounter    int64   `json:"msgOutCounter"`
	AverageMsgSize   float64 `json:"averageMsgSize"`
	// StorageSize is the bytes of the topic's ledgers; BacklogSize the bytes not yet
	// consumed by the slowest subscription (estimated).
	StorageSize          int64                        `json:"storageSize"`
	BacklogSize          int64                        `json:"backlogSize"`
	Publishers           []PublisherStats             `json:"publishers"`
	WaitingPublishers    int                          `json:"waitingPublishers"`
	Subscriptions        map[string]SubscriptionStats `json:"subscriptions"`
	Replication          map[string]any               `json:"replication"`
	DeduplicationStatus  string                       `json:"deduplicationStatus"`
	LastPublishTimestamp int64                        `json:"lastPublishTimestamp,omitempty"`
	// Terminated is a Magnetar extension: the topic takes no more messages.
	Terminated bool `json:"terminated,omitempty"`
	// MsgDropRate sums the subscriptions' (non-persistent topics).
	MsgDropRate float64 `json:"msgDropRate,omitempty"`
	// BacklogQuotaLimitSize (bytes) and BacklogQuotaLimitTime (seconds) are the backlog
	// quotas in force (-1: none); PublishRateLimitedTimes counts how often the publish rate
	// started holding SENDs.
	BacklogQuotaLimitSize   int64 `json:"backlogQuotaLimitSize"`
	BacklogQuotaLimitTime   int64 `json:"backlogQuotaLimitTime"`
	PublishRateLimitedTimes int64 `json:"publishRateLimitedTimes"`
	// ThrottledPublishes (SENDs held by the publish rate now) and BacklogQuotaBlock (the
	// backlog-quota policy refusing producers now, "" if none) are Magnetar extensions.
	ThrottledPublishes int    `json:"throttledPublishes"`
	BacklogQuotaBlock  string `json:"backlogQuotaBlock,omitempty"`
}

// PublisherStats is one producer's statistics.
type PublisherStats struct {
	AccessMode      string            `json:"accessMode"`
	ProducerID      int64             `json:"producerId"`
	ProducerName    string            `json:"producerName"`
	MsgRateIn       float64           `json:"msgRateIn"`
	MsgThroughputIn float64           `json:"msgThroughputIn"`
	AverageMsgSize  float64           `json:"averageMsgSize"`
	Address         string            `json:"address"`
	ConnectedSince  string            `json:"connectedSince"`
	ClientVersion   string            `json:"clientVersion"`
	Metadata        map[string]string `json:"metadata"`
}

// SubscriptionStats is one subscription's statistics.
type SubscriptionStats struct {
	Type             string  `json:"type"`
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	BytesOutCounter  int64   `json:"bytesOutCounter"`
	MsgOutCounter    int64   `json:"msgOutCounter"`
	MsgRateRedeliver float64 `json:"msgRateRedeliver"`
	MessageAckRate   float64 `json:"messageAckRate"`
	// MsgBacklog counts entries (not messages) after the mark-delete position that are not
	// acknowledged, as Pulsar does.
	MsgBacklog                         int64             `json:"msgBacklog"`
	MsgBacklogNoDelayed                int64             `json:"msgBacklogNoDelayed"`
	BacklogSize                        int64             `json:"backlogSize"`
	MsgDelayed                         int64             `json:"msgDelayed"`
	UnackedMessages                    int64             `json:"unackedMessages"`
	ActiveConsumerName                 string            `json:"activeConsumerName,omitempty"`
	Consumers                          []ConsumerStats   `json:"consumers"`
	IsDurable                          bool              `json:"isDurable"`
	IsReplicated                       bool              `json:"isReplicated"`
	LastAckedTimestamp                 int64             `json:"lastAckedTimestamp"`
	LastConsumedTimestamp              int64             `json:"lastConsumedTimestamp"`
	SubscriptionProperties             map[string]string `json:"subscriptionProperties"`
	ConsumersAfterMarkDeletePosition   map[string]string `json:"consumersAfterMarkDeletePosition"` // Pulsar's Key_Shared set; {} here
	NonContiguousDeletedMessagesRanges int               `json:"nonContiguousDeletedMessagesRanges"`
	// MsgDropRate and MsgDropped (Magnetar's) count the messages of a non-persistent topic
	// dropped before this subscription read them.
	MsgDropRate float64 `json:"msgDropRate,omitempty"`
	MsgDropped  int64   `json:"msgDropped,omitempty"`
	// BlockedSubscriptionOnUnackedMsgs: the subscription is at its unacknowledged-message
	// limit.
	BlockedSubscriptionOnUnackedMsgs bool `json:"blockedSubscriptionOnUnackedMsgs"`
}

// ConsumerStats is one consumer's statistics.
type ConsumerStats struct {
	ConsumerName     string            `json:"consumerName"`
	AvailablePermits int               `json:"availablePermits"`
	UnackedMessages  int               `json:"unackedMessages"`
	MsgRateOut       float64           `json:"msgRateOut"`
	MsgThroughputOut float64           `json:"msgThroughputOut"`
	MsgRateRedeliver float64           `json:"msgRateRedeliver"`
	BytesOutCounter  int64             `json:"bytesOutCounter"`
	MsgOutCounter    int64             `json:"msgOutCounter"`
	Address          string            `json:"address"`
	ConnectedSince   string            `json:"connectedSince"`
	ClientVersion    string            `json:"clientVersion"`
	Metadata         map[string]string `json:"metadata"`
	// KeyHashRanges lists the hash ranges of a Key_Shared consumer ("[start, end]").
	KeyHashRanges []string `json:"keyHashRanges,omitempty"`
	// BlockedConsumerOnUnackedMsgs: the consumer is at its unacknowledged-message limit.
	BlockedConsumerOnUnackedMsgs bool `json:"blockedConsumerOnUnackedMsgs"`
	// LastConsumedFlowTimestamp is when the consumer last gave permits (FLOW; Unix ms).
	LastConsumedFlowTimestamp int64 `json:"lastConsumedFlowTimestamp"`
}

// InternalStats is the managed-ledger view of a topic (GET .../internalStats).
type InternalStats struct {
	EntriesAddedCounter        int64                  `json:"entriesAddedCounter"`
	NumberOfEntries            int64                  `json:"numberOfEntries"`
	TotalSize                  int64                  `json:"totalSize"`
	CurrentLedgerEntries       int64                  `json:"currentLedgerEntries"`
	CurrentLedgerSize          int64                  `json:"currentLedgerSize"`
	LastLedgerCreatedTimestamp string                 `json:"lastLedgerCreatedTimestamp"`
	WaitingCursorsCount        int                    `json:"waitingCursorsCount"`
	PendingAddEntriesCount     int                    `json:"pendingAddEntriesCount"`
	LastConfirmedEntry         string                 `json:"lastConfirmedEntry"`
	State                      string                 `json:"state"`
	Ledgers                    []LedgerStats          `json:"ledgers"`
	Cursors                    map[string]CursorStats `json:"cursors"`
	// TerminatedPosition is a Magnetar extension ("ledger:entry"), set once terminated.
	TerminatedPosition string `json:"terminatedPosition,omitempty"`
}

// LedgerStats is one ledger of a topic.
type LedgerStats struct {
	LedgerID  int64 `json:"ledgerId"`
	Entries   int64 `json:"entries"`
	Size      int64 `json:"size"`
	Timestamp int64 `json:"timestamp"`
	Offloaded bool  `json:"offloaded"`
}

// CursorStats is one cursor (subscription) of a topic.
type CursorStats struct {
	MarkDeletePosition                       string           `json:"markDeletePosition"`
	ReadPosition                             string           `json:"readPosition"`
	WaitingReadOp                            bool             `json:"waitingReadOp"`
	PendingReadOps                           int              `json:"pendingReadOps"`
	MessagesConsumedCounter                  int64            `json:"messagesConsumedCounter"`
	CursorLedger                             int64            `json:"cursorLedger"`
	IndividuallyDeletedMessages              string           `json:"individuallyDeletedMessages"`
	State                                    string           `json:"state"`
	NumberOfEntriesSinceFirstNotAckedMessage int64            `json:"numberOfEntriesSinceFirstNotAckedMessage"`
	TotalNonContiguousDeletedMessagesRange   int              `json:"totalNonContiguousDeletedMessagesRange"`
	Properties                               map[string]int64 `json:"properties"`
	// PersistentMarkDeletePosition (a Magnetar extension, named after the field of Pulsar's
	// ManagedCursorImpl) is the mark-delete position known durable: behind
	// markDeletePosition while a write is in flight or the mark-delete rate holds it
	// (MarkDeleteHeld).
	PersistentMarkDeletePosition string `json:"persistentMarkDeletePosition,omitempty"`
	MarkDeleteHeld               bool   `json:"markDeleteHeld,omitempty"`
}
