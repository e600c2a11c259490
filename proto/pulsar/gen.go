package pulsar

// Regenerate pb/pulsar.pb.go and pb/markers.pb.go after editing pulsar.proto or
// markers.proto (needs protoc and protoc-gen-go v1.36.12 on PATH; see README.md). The
// generated files are committed, so building and CI need neither.
//
//go:generate protoc -I ../.. --go_out=../.. --go_opt=module=github.com/magnetar-io/magnetar proto/pulsar/pulsar.proto proto/pulsar/markers.proto
