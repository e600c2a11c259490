// Package txnhost is the broker's transaction side: it hosts the transaction coordinators
// this broker serves, tracks transaction outcomes for its topics (the participants), and
// answers the transaction calls of the admin API (Pulsar's /admin/v3/transactions). It does
// not import package broker: what it needs of the broker is the small Broker interface
// below, which the broker root implements (bundle ownership, the loaded topics, partitioned
// topic creation and its id).
//
// # Usage
//
//	h := txnhost.New(brokerCtx, txnhost.Config{Store: store, Registry: reg, Cluster: "c",
//		Coordinators: 16, MaxActivePerCoordinator: 0}, broker)
//	defer h.Close()               // after brokerCtx ended
//	err := h.EnsureDefaults(ctx)  // tenant pulsar, pulsar/system, the assignment topic
//	topicCfg.Txn = h.TopicConfig(openLog)
//	h.Start()                     // once the broker has its metadata session
//	c, err := h.Coordinator(ctx, tc)
//
// Caller obligations:
//  1. The life context given to New bounds every coordinator load and the sweep; Close
//     waits for them, so end it before (or while) calling Close.
//  2. Broker.ID must be known before Start and before the first Coordinator call.
//  3. A nil *Host is "transactions off": Coordinator fails with topic.ErrTxnDisabled, the
//     admin calls with api.ErrNotAllowed, TopicConfig is nil; Start and Close do nothing.
//
// # Coordinators
//
// Coordinator i is served by the broker owning partition i of
// persistent://pulsar/system/transaction_coordinator_assign (clients find coordinators by
// looking those partitions up). Coordinator(tc) loads it on first use: a tc out of range,
// or a partition another broker owns (Broker.Acquire fails), is ErrNoCoordinator and
// nothing stays cached, so the next call tries again; one load runs per coordinator at a
// time and the other callers wait for it. The sweep (Start) loads, at once and then every
// sweepInterval, each coordinator not loaded here whose partition no broker owns: otherwise
// the open transactions of a coordinator whose broker died would never time out (their
// topics' readers stay pinned behind them) until a transactional client came back.
//
// Outcomes reach the participants through one txn.Tracker: it answers from a coordinator
// loaded here when it can (Settled), and on every ended transaction it tells the loaded
// participants (Topic.TxnEnded) so that those that never registered it drop the record
// its coordinator created for them. The coordinators and participants share one
// metadata.Batcher, so under load one store commit carries many transactions' writes.
//
// # Goroutines and locking
//
// The sweep (one goroutine, from Start to Close) and one goroutine per coordinator load.
// Host.mu is a leaf lock guarding the coordinator table. The metric
// magnetar_txn_buffer_max_read_lag_entries is collected at scrape time from
// Broker.LoadedTopics.
package txnhost
