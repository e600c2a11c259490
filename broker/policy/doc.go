// Package policy is Pulsar's namespace and topic policies as data: the table of policies
// (their REST path elements and record keys at namespace and topic level, and how a body
// is checked), the stored records (Record: a level's policies by key), the broker-level
// defaults (Defaults, Pulsar's broker.conf keys) and their resolution.
//
// Resolution is a pure function: Resolver.Resolve takes a topic's record and its
// namespace's record and returns the policies in force (topic, else namespace, else the
// broker's default). Reading and writing the records, watching them and applying the
// result to loaded topics are the broker's (packages broker and its resources); nothing
// here does I/O. The dynamic configuration (dynamic.go: Pulsar's broker settings changed at
// runtime, e.g. maxProducersPerTopic, allowAutoTopicCreation) replaces some of the
// broker's defaults atomically (Resolver.SetDynamic).
package policy
