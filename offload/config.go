package offload

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Driver names, as Pulsar's managedLedgerOffloadDriver takes them (matched
// case-insensitively).
const (
	DriverS3         = "S3"
	DriverAWSS3      = "aws-s3"
	DriverGCS        = "google-cloud-storage"
	DriverAzure      = "azureblob"
	DriverFilesystem = "filesystem"
	// DriverAliyunOSS is a Pulsar driver name this package does not implement; Validate
	// rejects it, pointing at aws-s3 with an endpoint.
	DriverAliyunOSS = "aliyun-oss"
)

// s3MinBlockSize is S3's smallest multipart part (all but the last), and Pulsar's minimum
// s3ManagedLedgerOffloadMaxBlockSizeInBytes.
const s3MinBlockSize = 5 << 20

// ReadPriority says which copy a read of a ledger that is both on bookies and offloaded
// prefers (Pulsar's OffloadedReadPriority).
type ReadPriority uint8

const (
	// TieredStorageFirst reads the offloaded copy once it is complete (Pulsar's default).
	TieredStorageFirst ReadPriority = iota
	// BookKeeperFirst reads the bookie copy while it exists.
	BookKeeperFirst
)

// String returns Pulsar's string form: "tiered-storage-first" or "bookkeeper-first".
func (p ReadPriority) String() string {
	switch p {
	case TieredStorageFirst:
		return "tiered-storage-first"
	case BookKeeperFirst:
		return "bookkeeper-first"
	}
	return fmt.Sprintf("ReadPriority(%d)", uint8(p))
}

// ParseReadPriority accepts Pulsar's string forms and its enum constant names
// (TIERED_STORAGE_FIRST, BOOKKEEPER_FIRST), case-insensitively.
func ParseReadPriority(s string) (ReadPriority, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "tiered-storage-first", "tiered_storage_first":
		return TieredStorageFirst, nil
	case "bookkeeper-first", "bookkeeper_first":
		return BookKeeperFirst, nil
	}
	return 0, fmt.Errorf("read priority %q: want tiered-storage-first or bookkeeper-first", s)
}

// Config is the offloader part of broker.conf (and of the OffloadPolicies JSON), under
// Pulsar's key names, which Set takes. The zero value has offload disabled; Defaults gives
// Pulsar's defaults. The universal keys (managedLedgerOffload…) win over the driver-specific
// ones (s3…, gcs…) when both are set.
type Config struct {
	Driver string // managedLedgerOffloadDriver; "" = offload disabled

	// Universal keys, for aws-s3, google-cloud-storage and azureblob. Zero: unset.
	Bucket                string // managedLedgerOffloadBucket (azureblob: the container)
	Region                string // managedLedgerOffloadRegion
	ServiceEndpoint       string // managedLedgerOffloadServiceEndpoint
	MaxBlockSizeInBytes   int64  // managedLedgerOffloadMaxBlockSizeInBytes
	ReadBufferSizeInBytes int64  // managedLedgerOffloadReadBufferSizeInBytes

	S3Region                string // s3ManagedLedgerOffloadRegion
	S3Bucket                string // s3ManagedLedgerOffloadBucket
	S3ServiceEndpoint       string // s3ManagedLedgerOffloadServiceEndpoint (enables path-style access)
	S3MaxBlockSizeInBytes   int64  // s3ManagedLedgerOffloadMaxBlockSizeInBytes [64 MiB, at least 5 MiB]
	S3ReadBufferSizeInBytes int64  // s3ManagedLedgerOffloadReadBufferSizeInBytes [1 MiB]
	S3CredentialID          string // s3ManagedLedgerOffloadCredentialId (with the secret: static credentials)
	S3CredentialSecret      string // s3ManagedLedgerOffloadCredentialSecret
	S3Role                  string // s3ManagedLedgerOffloadRole (an IAM role ARN to assume)
	S3RoleSessionName       string // s3ManagedLedgerOffloadRoleSessionName [pulsar-s3-offload]

	GCSRegion                string       // gcsManagedLedgerOffloadRegion
	GCSBucket                string       // gcsManagedLedgerOffloadBucket
	GCSMaxBlockSizeInBytes   int64        // gcsManagedLedgerOffloadMaxBlockSizeInBytes [64 MiB]
	GCSReadBufferSizeInBytes int64        // gcsManagedLedgerOffloadReadBufferSizeInBytes [1 MiB]
	GCSServiceAccountKeyFile string       // gcsManagedLedgerOffloadServiceAccountKeyFile
	FileSystemURI            string       // fileSystemURI: file:///dir or /dir
	FileSystemProfilePath    string       // fileSystemProfilePath (Hadoop's; accepted and unused)
	OffloadersDirectory      string       // offloadersDirectory (Pulsar's NAR directory; accepted and unused)
	ReadPriority             ReadPriority // managedLedgerDataReadPriority (broker.conf), managedLedgerOffloadedReadPriority (policies)
	ReadCacheSizeInBytes     int64        // managedLedgerOffloadReadCacheSizeInBytes (Magnetar) [2 blocks]
	ReadAheadBlocks          int          // managedLedgerOffloadReadAheadBlocks (Magnetar) [1]
	// FlowPermitsPerSecond bounds the bytes per second all the broker's offloads read from the
	// bookies together (managedLedgerOffloadFlowPermitsPerSecond; <= 0: no bound) [DefaultFlowPermitsPerSecond].
	FlowPermitsPerSecond int64
}

// DefaultFlowPermitsPerSecond is Magnetar's default managedLedgerOffloadFlowPermitsPerSecond
// (Pulsar's is -1, no bound): offloading competes with the publish path for CPU (reading the
// bookie, building and checksumming blocks, signing and sending uploads), and at this rate it
// takes a small enough share of a small machine's cores that publishing stays within 10% of its
// rate without offload (docs/BENCHMARKS-RESULTS.md, tiered storage).
const DefaultFlowPermitsPerSecond = 8 << 20

// Defaults returns Pulsar's defaults (offload disabled).
func Defaults() Config {
	return Config{
		S3MaxBlockSizeInBytes:    DefaultMaxBlockSize,
		S3ReadBufferSizeInBytes:  1 << 20,
		S3RoleSessionName:        "pulsar-s3-offload",
		GCSMaxBlockSizeInBytes:   DefaultMaxBlockSize,
		GCSReadBufferSizeInBytes: 1 << 20,
		FileSystemProfilePath:    "conf/filesystem_offload_core_site.xml",
		OffloadersDirectory:      "./offloaders",
		ReadPriority:             TieredStorageFirst,
		ReadAheadBlocks:          1,
		FlowPermitsPerSecond:     DefaultFlowPermitsPerSecond,
	}
}

// ConfigError is a configuration key with a bad or missing value.
type ConfigError struct {
	Key    string
	Value  string
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("offload: %s: %s", e.Key, e.Reason)
	}
	return fmt.Sprintf("offload: %s=%q: %s", e.Key, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrBadConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrBadConfig }

type configKey struct {
	name string
	set  func(c *Config, v string) error
}

func str(f func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *f(c) = v; return nil }
}

func i64(f func(*Config) *int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return errors.New("not an integer")
		}
		*f(c) = n
		return nil
	}
}

func setReadPriority(c *Config, v string) error {
	p, err := ParseReadPriority(v)
	if err != nil {
		return errors.New("want tiered-storage-first or bookkeeper-first")
	}
	c.ReadPriority = p
	return nil
}

// configKeys lists every key Set takes.
var configKeys = []configKey{
	{"managedLedgerOffloadDriver", str(func(c *Config) *string { return &c.Driver })},
	{"managedLedgerOffloadBucket", str(func(c *Config) *string { return &c.Bucket })},
	{"managedLedgerOffloadRegion", str(func(c *Config) *string { return &c.Region })},
	{"managedLedgerOffloadServiceEndpoint", str(func(c *Config) *string { return &c.ServiceEndpoint })},
	{"managedLedgerOffloadMaxBlockSizeInBytes", i64(func(c *Config) *int64 { return &c.MaxBlockSizeInBytes })},
	{"managedLedgerOffloadReadBufferSizeInBytes", i64(func(c *Config) *int64 { return &c.ReadBufferSizeInBytes })},
	{"s3ManagedLedgerOffloadRegion", str(func(c *Config) *string { return &c.S3Region })},
	{"s3ManagedLedgerOffloadBucket", str(func(c *Config) *string { return &c.S3Bucket })},
	{"s3ManagedLedgerOffloadServiceEndpoint", str(func(c *Config) *string { return &c.S3ServiceEndpoint })},
	{"s3ManagedLedgerOffloadMaxBlockSizeInBytes", i64(func(c *Config) *int64 { return &c.S3MaxBlockSizeInBytes })},
	{"s3ManagedLedgerOffloadReadBufferSizeInBytes", i64(func(c *Config) *int64 { return &c.S3ReadBufferSizeInBytes })},
	{"s3ManagedLedgerOffloadCredentialId", str(func(c *Config) *string { return &c.S3CredentialID })},
	{"s3ManagedLedgerOffloadCredentialSecret", str(func(c *Config) *string { return &c.S3CredentialSecret })},
	{"s3ManagedLedgerOffloadRole", str(func(c *Config) *string { return &c.S3Role })},
	{"s3ManagedLedgerOffloadRoleSessionName", str(func(c *Config) *string { return &c.S3RoleSessionName })},
	{"gcsManagedLedgerOffloadRegion", str(func(c *Config) *string { return &c.GCSRegion })},
	{"gcsManagedLedgerOffloadBucket", str(func(c *Config) *string { return &c.GCSBucket })},
	{"gcsManagedLedgerOffloadMaxBlockSizeInBytes", i64(func(c *Config) *int64 { return &c.GCSMaxBlockSizeInBytes })},
	{"gcsManagedLedgerOffloadReadBufferSizeInBytes", i64(func(c *Config) *int64 { return &c.GCSReadBufferSizeInBytes })},
	{"gcsManagedLedgerOffloadServiceAccountKeyFile", str(func(c *Config) *string { return &c.GCSServiceAccountKeyFile })},
	{"fileSystemURI", str(func(c *Config) *string { return &c.FileSystemURI })},
	{"fileSystemProfilePath", str(func(c *Config) *string { return &c.FileSystemProfilePath })},
	{"offloadersDirectory", str(func(c *Config) *string { return &c.OffloadersDirectory })},
	// broker.conf's key, and the OffloadPolicies JSON's.
	{"managedLedgerDataReadPriority", setReadPriority},
	{"managedLedgerOffloadedReadPriority", setReadPriority},
	{"managedLedgerOffloadReadCacheSizeInBytes", i64(func(c *Config) *int64 { return &c.ReadCacheSizeInBytes })},
	{"managedLedgerOffloadReadAheadBlocks", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("not an integer")
		}
		c.ReadAheadBlocks = n
		return nil
	}},
	// Pulsar's key (its ManagedLedgerConfig's offload read throttle), in bytes per second.
	{"managedLedgerOffloadFlowPermitsPerSecond", i64(func(c *Config) *int64 { return &c.FlowPermitsPerSecond })},
}

// ConfigKeys returns the keys Set takes, in a fixed order.
func ConfigKeys() []string {
	out := make([]string, len(configKeys))
	for i, k := range configKeys {
		out[i] = k.name
	}
	return out
}

// Set sets key to value (trimmed; an empty value leaves the setting unchanged, as Pulsar's
// configuration loader does). It reports known=false for a key that is not an offloader
// key, and a *ConfigError for a value the key does not take.
func (c *Config) Set(key, value string) (known bool, err error) {
	i := slices.IndexFunc(configKeys, func(k configKey) bool { return k.name == key })
	if i < 0 {
		return false, nil
	}
	value = strings.TrimSpace(value)
	if value == "" {
		return true, nil
	}
	if err := configKeys[i].set(c, value); err != nil {
		return true, &ConfigError{Key: key, Value: value, Reason: err.Error()}
	}
	return true, nil
}

// Enabled reports whether an offload driver is configured.
func (c *Config) Enabled() bool { return strings.TrimSpace(c.Driver) != "" }

// driverKind is the implementation a driver name selects.
type driverKind uint8

const (
	kindNone driverKind = iota
	kindS3
	kindGCS
	kindAzure
	kindFilesystem
)

func (c *Config) kind() driverKind {
	switch strings.ToLower(strings.TrimSpace(c.Driver)) {
	case "":
		return kindNone
	case "s3", "aws-s3":
		return kindS3
	case "google-cloud-storage":
		return kindGCS
	case "azureblob":
		return kindAzure
	case "filesystem":
		return kindFilesystem
	}
	return 255
}

// setting is an effective value and the key it came from (for error messages).
type setting[T comparable] struct {
	key string
	v   T
}

// pick returns the first setting with a non-zero value, or the last one (zero) if none.
func pick[T comparable](s ...setting[T]) setting[T] {
	var zero T
	for _, x := range s {
		if x.v != zero {
			return x
		}
	}
	return s[len(s)-1]
}

// EffectiveBucket returns the bucket (container) and the key it came from.
func (c *Config) EffectiveBucket() (bucket, key string) {
	var s setting[string]
	switch c.kind() {
	case kindS3:
		s = pick(setting[string]{"managedLedgerOffloadBucket", c.Bucket}, setting[string]{"s3ManagedLedgerOffloadBucket", c.S3Bucket})
	case kindGCS:
		s = pick(setting[string]{"managedLedgerOffloadBucket", c.Bucket}, setting[string]{"gcsManagedLedgerOffloadBucket", c.GCSBucket})
	default:
		s = setting[string]{"managedLedgerOffloadBucket", c.Bucket}
	}
	return s.v, s.key
}

// EffectiveRegion returns the region and the key it came from.
func (c *Config) EffectiveRegion() (region, key string) {
	var s setting[string]
	switch c.kind() {
	case kindS3:
		s = pick(setting[string]{"managedLedgerOffloadRegion", c.Region}, setting[string]{"s3ManagedLedgerOffloadRegion", c.S3Region})
	case kindGCS:
		s = pick(setting[string]{"managedLedgerOffloadRegion", c.Region}, setting[string]{"gcsManagedLedgerOffloadRegion", c.GCSRegion})
	default:
		s = setting[string]{"managedLedgerOffloadRegion", c.Region}
	}
	return s.v, s.key
}

// EffectiveEndpoint returns the service endpoint and the key it came from.
func (c *Config) EffectiveEndpoint() (endpoint, key string) {
	s := setting[string]{"managedLedgerOffloadServiceEndpoint", c.ServiceEndpoint}
	if c.kind() == kindS3 {
		s = pick(s, setting[string]{"s3ManagedLedgerOffloadServiceEndpoint", c.S3ServiceEndpoint})
	}
	return s.v, s.key
}

// EffectiveMaxBlockSize returns the block size and the key it came from (default 64 MiB).
func (c *Config) EffectiveMaxBlockSize() (n int64, key string) {
	s := setting[int64]{"managedLedgerOffloadMaxBlockSizeInBytes", c.MaxBlockSizeInBytes}
	switch c.kind() {
	case kindS3:
		s = pick(s, setting[int64]{"s3ManagedLedgerOffloadMaxBlockSizeInBytes", c.S3MaxBlockSizeInBytes})
	case kindGCS:
		s = pick(s, setting[int64]{"gcsManagedLedgerOffloadMaxBlockSizeInBytes", c.GCSMaxBlockSizeInBytes})
	}
	if s.v == 0 {
		s.v = DefaultMaxBlockSize
	}
	return s.v, s.key
}

// EffectiveReadBufferSize returns the read buffer size and the key it came from (default
// 1 MiB). Blocks are fetched whole, so it only has to be positive.
func (c *Config) EffectiveReadBufferSize() (n int64, key string) {
	s := setting[int64]{"managedLedgerOffloadReadBufferSizeInBytes", c.ReadBufferSizeInBytes}
	switch c.kind() {
	case kindS3:
		s = pick(s, setting[int64]{"s3ManagedLedgerOffloadReadBufferSizeInBytes", c.S3ReadBufferSizeInBytes})
	case kindGCS:
		s = pick(s, setting[int64]{"gcsManagedLedgerOffloadReadBufferSizeInBytes", c.GCSReadBufferSizeInBytes})
	}
	if s.v == 0 {
		s.v = 1 << 20
	}
	return s.v, s.key
}

// FileSystemDir returns the directory fileSystemURI names (file:///dir or an absolute or
// relative path).
func (c *Config) FileSystemDir() (string, error) {
	v := strings.TrimSpace(c.FileSystemURI)
	if v == "" {
		return "", &ConfigError{Key: "fileSystemURI", Reason: "required by the filesystem driver"}
	}
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || u.Path == "" {
			return "", &ConfigError{Key: "fileSystemURI", Value: v, Reason: "only file:///path (a local directory) is supported"}
		}
		return filepath.Clean(u.Path), nil
	}
	return filepath.Clean(v), nil
}

// Validate checks the configuration without touching the network or the disk. The error is
// a *ConfigError naming the first bad key (the CLI exits 2 with it). A configuration with
// no driver is valid (offload disabled).
func (c *Config) Validate() error {
	k := c.kind()
	switch k {
	case kindNone:
		return nil
	case 255:
		if strings.EqualFold(strings.TrimSpace(c.Driver), DriverAliyunOSS) {
			return &ConfigError{Key: "managedLedgerOffloadDriver", Value: c.Driver,
				Reason: "not supported; OSS speaks the S3 API: use aws-s3 with s3ManagedLedgerOffloadServiceEndpoint"}
		}
		return &ConfigError{Key: "managedLedgerOffloadDriver", Value: c.Driver,
			Reason: "unknown driver; want one of aws-s3, S3, google-cloud-storage, azureblob, filesystem"}
	}
	if k == kindFilesystem {
		if _, err := c.FileSystemDir(); err != nil {
			return err
		}
	} else if b, key := c.EffectiveBucket(); b == "" {
		return &ConfigError{Key: key, Reason: fmt.Sprintf("required by the %s driver", c.Driver)}
	}
	if ep, key := c.EffectiveEndpoint(); ep != "" {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &ConfigError{Key: key, Value: ep, Reason: "want an http:// or https:// URL"}
		}
	}
	n, key := c.EffectiveMaxBlockSize()
	switch {
	case n < MinBlockSize || n > 1<<31-1:
		return &ConfigError{Key: key, Value: strconv.FormatInt(n, 10), Reason: fmt.Sprintf("want %d..%d", MinBlockSize, 1<<31-1)}
	case k == kindS3 && n < s3MinBlockSize:
		return &ConfigError{Key: key, Value: strconv.FormatInt(n, 10), Reason: "S3 needs at least 5 MiB (5242880)"}
	}
	if n, key := c.EffectiveReadBufferSize(); n <= 0 {
		return &ConfigError{Key: key, Value: strconv.FormatInt(n, 10), Reason: "must be positive"}
	}
	if (c.S3CredentialID == "") != (c.S3CredentialSecret == "") && k == kindS3 {
		key := "s3ManagedLedgerOffloadCredentialSecret"
		if c.S3CredentialID == "" {
			key = "s3ManagedLedgerOffloadCredentialId"
		}
		return &ConfigError{Key: key, Reason: "the credential id and secret go together"}
	}
	if c.ReadCacheSizeInBytes < 0 {
		return &ConfigError{Key: "managedLedgerOffloadReadCacheSizeInBytes", Value: strconv.FormatInt(c.ReadCacheSizeInBytes, 10), Reason: "must not be negative"}
	}
	if c.ReadAheadBlocks < 0 {
		return &ConfigError{Key: "managedLedgerOffloadReadAheadBlocks", Value: strconv.Itoa(c.ReadAheadBlocks), Reason: "must not be negative"}
	}
	return nil
}

// Options derives the Offloader options from a valid configuration.
func (c *Config) Options() Options {
	n, _ := c.EffectiveMaxBlockSize()
	o := Options{MaxBlockSize: int(n), CacheSize: c.ReadCacheSizeInBytes, ReadAheadBlocks: c.ReadAheadBlocks,
		OffloadBytesPerSecond: c.FlowPermitsPerSecond}
	if c.kind() == kindS3 {
		o.PartSize = max(int(n), s3MinBlockSize)
	}
	return o
}
