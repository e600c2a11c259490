// Package replhost runs the broker's geo-replicators: for every loaded persistent topic
// (partition) whose replication clusters — the topic's own, else its namespace's — name
// remote clusters, one replicator per remote cluster, each the I/O side of a
// replication.Core (package replication: the state machine, its simulation and the
// receiving side's contract, which package broker/topic honours).
//
// # Usage
//
//	h := replhost.New(replhost.Config{LocalCluster: "east", Remote: remoteOf, Core: replication.Config{MaxPending: 1000}})
//	reg.MustRegister(h.Collector())          // pulsar_replication_* metrics
//	h.Update(ctx, t, []string{"east", "west"}, replhost.Settings{}) // on load and every policy change of t
//	defer h.Close()
//
// The caller's obligations:
//
//  1. Call Update for a topic when it loads and whenever its replication clusters may have
//     changed (the broker does it from the registry's policy application: load, namespace
//     and topic policy watches). A cluster no longer listed has its replicator stopped and
//     its cursor (pulsar.repl.<cluster>) deleted; a topic that closes stops its
//     replicators and keeps their cursors.
//  2. Remote returns the client of a cluster (built from its cluster record: URL,
//     credentials, TLS); a replicator asks for it at each connect (a corrected record
//     applies at the next reconnect; a missing one fails the connect and the backlog
//     grows). A client it returned must stay usable while sessions on it run.
//  3. Close before the topics unload: the replicators write their last mark-delete
//     position while their managed ledgers are open.
//
// # Goroutines
//
// One per replicator (replicator.run) owns its core, its remote producers (one
// pulsarclient.SessionProducer per producer epoch), its cursor calls and its timer. Every
// completion — a producer connected or failed, a session ended, a send's receipt or error,
// a read's entries, a mark-delete write, a reset, the timer — comes back to run as an event
// on its inbox (internal/inbox), carrying the epoch, ticket or tag the core issued; the
// core drops stale ones. Helper goroutines do the blocking calls (connect, read, the
// mark-delete write and flush) and are waited for when the replicator stops. A topic's
// replicators stop when it starts closing (topic.Topic.OnClose: the topic closes its
// managed ledger only after their last mark-delete write), and, as a fallback, one
// goroutine per topic stops them when it is done. Memory: the core's window
// (Config.MaxPending entries) bounds what a replicator holds, whatever the backlog.
//
// Replicated subscriptions (Config.ReplSubs, package replication/replsub): every topic
// with replicators has one more owner goroutine (subsController.run) over its
// replsub.Controller, and one writer goroutine that publishes its markers on the topic one
// after the other (topic.PublishMarker). Its inputs are events on its inbox: each
// replicator hands it, after every read, the request, response and update markers its
// remote cluster published (replicated here) and the fact that data was read, and tells
// it when its producer connects or disconnects; the topic's replicated subscriptions hand
// it the snapshots their mark-delete positions passed (topic.SetReplicatedSubscriptions),
// and its timer ticks. It applies other clusters' updates with topic.AckReplicated on
// helper goroutines. It stops with the topic, after the replicators.
//
// # Statistics
//
// The replication section of the topic stats (ReplicatorStats, Pulsar's JSON names:
// msgRateOut, msgThroughputOut, msgRateExpired, replicationBacklog — the cursor's backlog
// —, connected, replicationDelayInSeconds, outboundConnection, outboundConnectedSince; the
// topic adds msgRateIn, msgThroughputIn and the inbound connection from the remote's
// replicator producer publishing here); package broker/pulsarmetrics exports them as
// pulsar_replication_* (per topic, or per namespace) with the label remote_cluster. The
// replication cursors appear in the topic's internal stats (topic.Replication.Cursors),
// their properties included.
//
// # Logs
//
// Why a replicator is not connected, as a warning rate-limited per replicator
// (internal/ratelog): a connect that failed (no cluster record, no URL in it, the remote
// unreachable or refusing the credentials, a partitioned topic whose partition counts
// differ between the clusters), a lost connection, a send the remote refused.
//
// # Partitioned topics
//
// A partition's replicator publishes to the same partition on the remote cluster; before
// each connect it checks, through the remote's admin API (Config.Admin, Remotes.Admin: the
// cluster record's serviceUrl), that the remote has the partitioned topic with the local
// partition count, creating it there if missing, and refuses to connect on a mismatch
// (partitions.go: ErrPartitionsMismatch), as Pulsar's
// createTopicToRemoteClusterForReplication=true does.
//
// # Not done yet
//
//   - The admin's reset of a replication cursor (the core's Reset) has no REST path yet; the
//     owner's cursor cannot seek, so a core read that does not follow the last one is
//     logged (it cannot happen without a reset).
//   - The replicator dispatch rate (replicatorDispatchRate) and the message TTL reach the
//     cores (Settings; the rate is tested end to end, the TTL only by the core's
//     simulation, R9). Pulsar's broker defaults dispatchThrottlingRatePerReplicatorIn*
//     are not configurable.
//   - A non-partitioned topic is not created on the remote through its admin API (Pulsar
//     does): the replicator's producer creates it there; createTopicToRemoteClusterForReplication
//     is not configurable (always true).
//   - Pulsar's periodic replication policy check (replicationPolicyCheckDurationSeconds) is
//     not run: the registry's policy watches drive Update.
//   - Aborted transactions' messages are not asked of the transaction buffer (Meta.Aborted
//     is never set): an aborted transactional message is replicated.
package replhost
