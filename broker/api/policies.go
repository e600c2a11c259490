package api

// RetentionPolicies is Pulsar's retention policy (-1: infinite).
type RetentionPolicies struct {
	RetentionTimeInMinutes int   `json:"retentionTimeInMinutes"`
	RetentionSizeInMB      int64 `json:"retentionSizeInMB"`
}

// BacklogQuota is Pulsar's backlog quota: limitSize bytes (destination_storage) or limitTime
// seconds (message_age), and what happens beyond it.
type BacklogQuota struct {
	Limit     *int64 `json:"limit,omitempty"` // legacy form of LimitSize
	LimitSize int64  `json:"limitSize"`
	LimitTime int64  `json:"limitTime"`
	Policy    string `json:"policy"`
}

// PublishRate is Pulsar's publish rate (per second; -1 or 0: unlimited).
type PublishRate struct {
	PublishThrottlingRateInMsg  int64 `json:"publishThrottlingRateInMsg"`
	PublishThrottlingRateInByte int64 `json:"publishThrottlingRateInByte"`
}

// DispatchRate is Pulsar's dispatch rate (per ratePeriodInSecond; -1: unlimited).
type DispatchRate struct {
	DispatchThrottlingRateInMsg  int64 `json:"dispatchThrottlingRateInMsg"`
	DispatchThrottlingRateInByte int64 `json:"dispatchThrottlingRateInByte"`
	RelativeToPublishRate        bool  `json:"relativeToPublishRate"`
	RatePeriodInSecond           int   `json:"ratePeriodInSecond"`
}

// SubscribeRate is Pulsar's subscribe rate per consumer.
type SubscribeRate struct {
	SubscribeThrottlingRatePerConsumer int `json:"subscribeThrottlingRatePerConsumer"`
	RatePeriodInSecond                 int `json:"ratePeriodInSecond"`
}

// InactiveTopicPolicies is Pulsar's inactive topic policy.
type InactiveTopicPolicies struct {
	InactiveTopicDeleteMode    string `json:"inactiveTopicDeleteMode"`
	MaxInactiveDurationSeconds int    `json:"maxInactiveDurationSeconds"`
	DeleteWhileInactive        bool   `json:"deleteWhileInactive"`
}

// PersistencePolicies is Pulsar's persistence policy for new ledgers.
type PersistencePolicies struct {
	BookkeeperEnsemble             int     `json:"bookkeeperEnsemble"`
	BookkeeperWriteQuorum          int     `json:"bookkeeperWriteQuorum"`
	BookkeeperAckQuorum            int     `json:"bookkeeperAckQuorum"`
	ManagedLedgerMaxMarkDeleteRate float64 `json:"managedLedgerMaxMarkDeleteRate"`
}

// DelayedDeliveryPolicies is Pulsar's delayed delivery policy.
type DelayedDeliveryPolicies struct {
	Active                   bool  `json:"active"`
	TickTime                 int64 `json:"tickTime"`
	MaxDeliveryDelayInMillis int64 `json:"maxDeliveryDelayInMillis"`
}

// AutoTopicCreationOverride is Pulsar's namespace auto topic creation policy.
type AutoTopicCreationOverride struct {
	AllowAutoTopicCreation bool   `json:"allowAutoTopicCreation"`
	TopicType              string `json:"topicType"`
	DefaultNumPartitions   *int   `json:"defaultNumPartitions,omitempty"`
}

// AutoSubscriptionCreationOverride is Pulsar's auto subscription creation policy.
type AutoSubscriptionCreationOverride struct {
	AllowAutoSubscriptionCreation bool `json:"allowAutoSubscriptionCreation"`
}

// Backlog quota types and policies (Pulsar's names).
const (
	QuotaDestinationStorage = "destination_storage"
	QuotaMessageAge         = "message_age"

	QuotaProducerRequestHold     = "producer_request_hold"
	QuotaProducerException       = "producer_exception"
	QuotaConsumerBacklogEviction = "consumer_backlog_eviction"
)
