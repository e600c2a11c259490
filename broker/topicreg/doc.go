// Package topicreg is the broker's topic registry: it loads, serves and unloads the
// topics this broker owns, applies their policies and runs the monitors that enforce them,
// wires compaction and answers the topic-level admin calls (stats, subscriptions, cursors,
// inspection, policies). The broker root builds it (broker/topics.go) and embeds it in
// Service, so its exported methods are the service API's topic part.
//
// It sees the rest of the broker through two small interfaces: Records (the typed records
// of package broker/resources, topic policy records included) and Owner (bundle ownership,
// package broker/ownership). It imports neither the broker root nor broker/server.
//
// # Loading
//
// The registry is a mutex-guarded map name → entry. Loading a topic runs on its own
// goroutine and completes a future (topicEntry.ready) the callers wait on; a topic that
// closed meanwhile is loaded again. openTopic checks existence and auto-creation
// (policy.Resolver), takes the topic's bundle (Owner.AcquireTopic), creates the topic
// record, opens the managed ledger (mlog.go binds topic.Log to it; each cursor has an
// ordered worker goroutine for acknowledgements and resets, so a reset is never overtaken
// by an older acknowledgement), starts the topic's goroutine (package broker/topic), applies
// its policies and finally checks the bundle is still served under the current session
// (Owner.Serving): a topic never serves a bundle released while it loaded. RefuseLoads
// (the broker closing) fails every later load with api.ErrServiceNotReady.
//
// # Goroutines
//
// One per topic being loaded; StartMonitors runs the compaction monitor, the policy
// monitor and its two policy watches (metadata.Follower on the namespace and topic policy
// prefixes); all end with the context given to New and WaitMonitors waits for them.
//
// # Compaction (compaction.go, package broker/compaction)
//
// Every loaded persistent topic has a compaction manager, made when it opens and closed
// with it; ReadCompacted consumers (Exclusive and Failover only) and readers get their
// cursor wrapped by it. A compaction keeps the __compaction subscription right after the
// horizon, so entries not compacted yet are retained. The compaction monitor checks the
// loaded topics every CompactionCheckInterval against their compaction threshold (topic
// policy, else the namespace's compaction_threshold).
//
// # Policies (policies.go, policyapply.go; resolution in package broker/policy)
//
// Every policy has Pulsar's REST paths and record keys at two levels: the namespace record
// (Pulsar's Policies JSON: retention_policies, backlog_quota_map, message_ttl_in_seconds,
// publishMaxMessageRate by cluster, max_producers_per_topic, …) and the topic policy record
// at metadata.TopicFeaturePolicyKey (Pulsar's TopicPolicies JSON: retentionPolicies,
// backLogQuotaMap, messageTTLInSeconds, publishRate, maxProducerPerTopic, …, with the
// schema compatibility strategy and the compaction threshold). A value is resolved topic,
// then namespace, then Config.Policies / Config.ManagedLedger (the broker's configuration);
// backlog quotas per type. A set or remove is checked first (ErrInvalidArgument, nothing
// written); then the loaded topics concerned get their resolved policies at once, and a
// watch of both record prefixes (policyMonitor) does the same for changes made through
// another broker. A topic policy request to a broker that does not own the topic's bundle
// is redirected (307, NotOwnerError) to the owner, as Pulsar's validateTopicOwnership does.
// A topic gets its policies when it loads, and on every change: retention and persistence
// go into its managed ledger's configuration (live too: ManagedLedger.SetRetention trims
// under the new values, SetPersistence gives the ledgers created after it the new
// E/WQ/AQ), the rest to topic.SetPolicies, an event for the topic goroutine that passes the
// subscriptions' part on to theirs.
//
// Enforcement: in the topic and subscription goroutines (broker/topic/policy.go) for max
// producers (ProducerBusy "Topic '…' reached max producers limit"), max consumers per topic
// and per subscription (ConsumerBusy), max subscriptions (NotAllowedError), max message
// size (SEND_ERROR NotAllowedError), max unacknowledged messages per consumer and per
// subscription (the dispatcher stops at the limit until acks come), the publish rate
// (token buckets; SENDs beyond it wait in order, holding their connection's pending budget,
// so the connection stops reading: backpressure, never dropping), the topic and
// subscription dispatch rates (cursor reads wait; permits are kept), auto subscription
// creation off (SubscriptionNotFound), delayed delivery off (deliver_at_time ignored) and
// its tick time (a message due within it of now is delivered now, Pulsar's non-strict
// mode; Magnetar's default is 0, exact, where Pulsar's delayedDeliveryTickTimeMillis is
// 1000), the subscribe rate per consumer (client host, consumer name and id, as Pulsar's
// SubscribeRateLimiter keys them; beyond it NotAllowedError "Subscribe limited by
// subscribe rate limit per consumer."), deduplication on and off on the live topic
// (enabling starts from an empty state, as Pulsar's new deduplication cursor does) and
// the deduplication snapshot interval (a snapshot at that period when entries were stored
// since the last one, besides every DeduplicationSnapshotInterval entries); auto topic
// creation (allowed or not) when a topic loads, and the partitioned type on the client's
// partitioned-metadata request, binary or HTTP with checkAllowAutoCreation=true (a topic
// that does not exist is created partitioned, with defaultNumPartitions). policyMonitor, every
// Config.Policies interval, checks backlog quotas (destination_storage against each
// subscription's backlog size, message_age against the publish time of its oldest
// unacknowledged entry): consumer_backlog_eviction skips the oldest backlog of the
// subscriptions over it; producer_request_hold and producer_exception close the producers
// and refuse new ones with ProducerBlockedQuotaExceededError (the Go client retries, its
// sends time out) or ProducerBlockedQuotaExceededException (the client fails its pending
// messages) until the backlog is back under the quota. It also expires messages older than
// the TTL (a cumulative ack of the subscriptions' entries published before the cutoff,
// never moving a cursor back), deletes topics inactive for their inactive-topic policy and
// (every SubscriptionExpiryCheckInterval) the durable subscriptions seen without consumers
// for longer than their subscription expiration time (as in Pulsar, the time is counted
// from when this broker first saw the subscription without consumers). The persistence
// policy's managedLedgerMaxMarkDeleteRate (else the broker's
// managedLedgerDefaultMarkDeleteRateLimit, Pulsar's 1.0 in the broker and standalone
// commands, unlimited in a Config left zero) bounds how often each subscription's cursor
// persists its acknowledgements, live (ManagedLedger.SetMarkDeleteRate); beyond it the
// newest state is held until the next allowed persist, the flush timer
// (managedLedgerCursorPositionFlushSeconds), an unload or close: a crash may redeliver the
// held acknowledgements (at-least-once), never a committed transaction's (the commit
// flushes the cursor first). Internal stats show persistentMarkDeletePosition and
// markDeleteHeld. A dispatch rate with relativeToPublishRate (topic or subscription) is
// the configured rate plus the topic's publish rate, measured every second. The delayed
// delivery max delay refuses SENDs delayed by more (NotAllowedError). The replication
// clusters, the message TTL and the replicator dispatch rate reach the topic's
// geo-replicators (package broker/replhost) through Config.OnPolicies, called after every
// application of a topic's policies. Retention 0 (the
// default) keeps nothing consumed: a topic with no subscription keeps only its current
// ledger (package mledger, Retention).
package topicreg
