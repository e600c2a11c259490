// Package loadmgr is the brokers' load manager, after Pulsar's modular load manager
// (ModularLoadManagerImpl, LoadManagerShared, ThresholdShedder, LeastLongTermMessageRate,
// BundleSplitterTask): every broker reports its load to the metadata store; one elected
// leader picks the least loaded broker for an unowned bundle (the brokers send such lookups
// to Leader), moves bundles off overloaded brokers and splits hot bundles, through Pulsar's
// admin REST API on the bundle's owner.
//
// # Usage (package broker)
//
//	lm, err := loadmgr.Start(ctx, loadmgr.Config{
//		Store: store,
//		Self: loadmgr.Broker{ID: info.ID, ServiceURL: info.ServiceURL, WebServiceURL: info.HTTPURL,
//			ServiceURLTLS: info.ServiceURLTLS, WebServiceURLTLS: info.HTTPURLTLS},
//		SessionTTL:  cfg.SessionTTL,
//		BundleStats: svc.bundleLoads, // map[bundle]loadmgr.BundleLoad of the bundles it owns
//		Metrics:     loadmgr.NewMetrics(reg),
//		Logger:      log,
//	})
//	...
//	owner, err := lm.SelectBroker(ctx, "tenant/ns/0x00000000_0x40000000") // broker.BrokerSelector
//	...
//	lm.Close() // before the store
//
// Caller obligations:
//  1. Register the broker under metadata.BrokerKey(Self.ID) (broker.BrokerInfo JSON) before
//     Start: only registered brokers are candidates, and the leader sends its admin requests
//     to their webServiceUrl.
//  2. BundleStats runs every ReportInterval on a helper goroutine (never two at once): it
//     must be safe to call concurrently with the broker's own work, and should list every
//     owned bundle, with a zero load if none of its topics is loaded. Bundle names are
//     "<tenant>/<ns>/0x<lo>_0x<hi>".
//  3. Serve PUT /admin/v2/namespaces/{t}/{ns}/{range}/unload?destinationBroker={id} (move
//     the bundle to broker id) and .../{range}/split?unload=false&splitAlgorithmName=range_equally_divide
//     on the web service URL, authorized for whatever Executor.Prepare adds.
//  4. Close the Manager before the store; Close revokes its session, so its report and
//     leadership go at once.
//
// # Metadata (metadata/keys.go)
//
//	/loadbalance/brokers/<id>   ephemeral (the Manager's session): Report JSON, in the shape of
//	                            Pulsar's LocalBrokerData (cpu, memory, msgRateIn/Out,
//	                            msgThroughputIn/Out, numTopics, numBundles, lastStats per bundle)
//	/loadbalance/leader         ephemeral: the leader's Broker JSON (id, serviceUrl, webServiceUrl)
//
// The reporter rewrites its report when a rate, the topic count or a resource changed by more
// than ReportThresholdPercent, when its set of bundles changed, or after ReportMaxInterval.
// The election is a "must not exist" put of the leader key through the session; followers
// retry on the key's deletion and every ReportInterval, so a dead leader is replaced within
// its session TTL.
//
// # Decisions (State, the sans-I/O core)
//
// State holds the live brokers, their last reports and the decisions their reports do not
// show yet; it reads no clock and does no I/O. A bundle counts on the broker a pending move
// or assignment sent it to, else on the newest report listing it, so a plan never re-decides
// on stale reports.
//   - Placement (SelectBroker, and the destination of every unload): LeastLongTermMessageRate,
//     the least message rate among brokers whose resource usage is under OverloadedPercent;
//     ties go to fewer bundles, then the smaller id. The bundles SelectBroker assigned count
//     on their broker for AssignmentTTL, each with at least Pulsar's estimate for a bundle
//     it has no data of (50 msg/s in and out, as ModularLoadManagerImpl counts its
//     preallocated bundles) whatever the broker reports for it meanwhile, so a burst of
//     lookups spreads even over brokers whose reported rates differ (with no load it would
//     all go to the least loaded one; with the estimate dropped at the first report, the
//     rest of it to the broker that reported first). Shedding balances reported loads only.
//   - Shedding (ThresholdShedder): a broker's usage is the larger of its weighted resource
//     usage (CPU, memory, bandwidth) and its share of the cluster's message rate. A broker
//     more than ThresholdPercent points over the average sheds its busiest bundles not moved
//     within GracePeriod, until it is projected 5% under the average; each goes to the
//     placement's choice among the others, only if that leaves the destination below the
//     source. A broker's sole bundle stays; overloads under MinUnloadMsgRate are left alone.
//   - Splits (BundleSplitterTask): a bundle over the topic, session, message rate or
//     bandwidth limit is split in two, unless its namespace has MaxBundles bundles (as
//     counted in the reports).
//
// Deviations from Pulsar: the shedder balances message rate shares as well as resource
// usage (so co-located brokers, whose host CPU is one, still balance), keeps no history
// (the rates are already averaged by the broker), and names the destination
// (destinationBroker) instead of leaving it to the next lookup. SelectBroker answers from
// this manager's view; package broker redirects the lookups of unowned bundles to the
// leader (as Pulsar's centralized load manager does), so that one view counts every
// assignment of a burst. While no leader is known any broker decides; the ownership
// record's "must not exist" put settles two brokers choosing at once.
//
// # Goroutines
//
//   - Manager.run (one per Manager): owns the State, the role, the session and the
//     reporter's last report. It selects over the two followers (PrefixBrokers,
//     PrefixLoadBalance), the session's Done, the report and shedding tickers, SelectBroker
//     and Reports requests, and the closures its helpers post. It does no I/O itself.
//   - two followers (one per Manager and prefix, metadata.Follower): each follows a watch
//     from Start's listing and lists again after a watch ended, handing the updates to run.
//   - helpers (short-lived, via goIO): one per report (it calls BundleStats and Resources,
//     compares with the last written report and writes), election attempt, new session,
//     and plan execution (its actions through the Executor, up to
//     maxParallelActions at once on goroutines of their own). They touch no state: they post
//     a closure that run executes.
//
// Manager.role is an atomic mirror of the role for Role(), Manager.leader of the leader
// key's holder for Leader(); no other state is shared.
//
// # Invariants
//
//   - A bundle is moved by shedding at most once per GracePeriod (the simulation checks it,
//     and that removing the grace period is caught).
//   - From all load on one of three brokers, within three shedding periods no broker carries
//     more than 1.5× the mean message rate (sim_test.go over 50 seeds; a placement that
//     picks the most loaded broker, or no shedding, is caught).
//   - A burst of assignments fills the brokers up from the least loaded: each goes to a
//     broker whose reported rate, its recent assignments counted at least as the estimate,
//     is the least (sim_test.go TestSimLookupBurst; assignments counted with no load, or
//     only until reported, are caught).
//   - Only the holder of the leader key decides; a brief overlap after a session loss is
//     harmless, since the owner executes unloads and splits of bundles it owns only.
package loadmgr
