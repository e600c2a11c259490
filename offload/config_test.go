package offload

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

func configOf(t *testing.T, kv ...string) Config {
	t.Helper()
	c := Defaults()
	for i := 0; i < len(kv); i += 2 {
		known, err := c.Set(kv[i], kv[i+1])
		if !known || err != nil {
			t.Fatalf("Set(%s, %s) = %v, %v", kv[i], kv[i+1], known, err)
		}
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kv      []string
		wantKey string // "" = valid
	}{
		{"disabled", nil, ""},
		{"s3", []string{"managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "b", "s3ManagedLedgerOffloadRegion", "eu-west-1"}, ""},
		{"S3 upper case", []string{"managedLedgerOffloadDriver", "S3", "managedLedgerOffloadBucket", "b"}, ""},
		{"unknown driver", []string{"managedLedgerOffloadDriver", "tape"}, "managedLedgerOffloadDriver"},
		{"aliyun", []string{"managedLedgerOffloadDriver", "aliyun-oss", "managedLedgerOffloadBucket", "b"}, "managedLedgerOffloadDriver"},
		{"s3 without bucket", []string{"managedLedgerOffloadDriver", "aws-s3"}, "s3ManagedLedgerOffloadBucket"},
		{"gcs without bucket", []string{"managedLedgerOffloadDriver", "google-cloud-storage"}, "gcsManagedLedgerOffloadBucket"},
		{"azure without container", []string{"managedLedgerOffloadDriver", "azureblob"}, "managedLedgerOffloadBucket"},
		{"filesystem without URI", []string{"managedLedgerOffloadDriver", "filesystem"}, "fileSystemURI"},
		{"filesystem hdfs", []string{"managedLedgerOffloadDriver", "filesystem", "fileSystemURI", "hdfs://nn:9000/x"}, "fileSystemURI"},
		{"filesystem", []string{"managedLedgerOffloadDriver", "filesystem", "fileSystemURI", "file:///var/offload"}, ""},
		{"bad endpoint", []string{"managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "b", "s3ManagedLedgerOffloadServiceEndpoint", "localhost:9000"}, "s3ManagedLedgerOffloadServiceEndpoint"},
		{"s3 small block", []string{"managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "b", "s3ManagedLedgerOffloadMaxBlockSizeInBytes", "1048576"}, "s3ManagedLedgerOffloadMaxBlockSizeInBytes"},
		{"universal block wins", []string{"managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "b", "managedLedgerOffloadMaxBlockSizeInBytes", "100"}, "managedLedgerOffloadMaxBlockSizeInBytes"},
		{"zero read buffer", []string{"managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "b", "s3ManagedLedgerOffloadReadBufferSizeInBytes", "-1"}, "s3ManagedLedgerOffloadReadBufferSizeInBytes"},
		{"secret without id", []string{"managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "b", "s3ManagedLedgerOffloadCredentialSecret", "s"}, "s3ManagedLedgerOffloadCredentialId"},
		{"negative cache", []string{"managedLedgerOffloadDriver", "filesystem", "fileSystemURI", "/x", "managedLedgerOffloadReadCacheSizeInBytes", "-1"}, "managedLedgerOffloadReadCacheSizeInBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := configOf(t, tc.kv...)
			err := c.Validate()
			if tc.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrBadConfig) || ce.Key != tc.wantKey {
				t.Fatalf("Validate: %v, want a ConfigError naming %s", err, tc.wantKey)
			}
		})
	}
}

func TestConfigSet(t *testing.T) {
	c := Defaults()
	if known, _ := c.Set("brokerServicePort", "6650"); known {
		t.Fatal("a broker key taken as an offload key")
	}
	if _, err := c.Set("s3ManagedLedgerOffloadMaxBlockSizeInBytes", "big"); err == nil {
		t.Fatal("non-integer block size accepted")
	}
	var ce *ConfigError
	if _, err := c.Set("managedLedgerDataReadPriority", "sideways"); !errors.As(err, &ce) || ce.Key != "managedLedgerDataReadPriority" {
		t.Fatalf("bad read priority: %v", err)
	}
	for _, v := range []string{"bookkeeper-first", "BOOKKEEPER_FIRST"} {
		c.ReadPriority = TieredStorageFirst
		if _, err := c.Set("managedLedgerOffloadedReadPriority", v); err != nil || c.ReadPriority != BookKeeperFirst {
			t.Fatalf("read priority %q: %v %v", v, c.ReadPriority, err)
		}
	}
	if _, err := c.Set("managedLedgerOffloadBucket", "  "); err != nil || c.Bucket != "" {
		t.Fatal("an empty value changed the setting")
	}
	if Defaults().ReadPriority.String() != "tiered-storage-first" {
		t.Fatal("default read priority is not Pulsar's")
	}
	// The offload throttle: Magnetar's default unless set, -1 (Pulsar's "no bound") passes
	// through to the Offloader as no bound.
	if d := Defaults(); d.FlowPermitsPerSecond != DefaultFlowPermitsPerSecond || d.Options().OffloadBytesPerSecond != DefaultFlowPermitsPerSecond {
		t.Fatalf("default throttle %d, options %d", d.FlowPermitsPerSecond, d.Options().OffloadBytesPerSecond)
	}
	for v, want := range map[string]int64{"1048576": 1 << 20, "-1": -1} {
		if _, err := c.Set("managedLedgerOffloadFlowPermitsPerSecond", v); err != nil || c.Options().OffloadBytesPerSecond != want {
			t.Fatalf("managedLedgerOffloadFlowPermitsPerSecond=%s: options %d, %v", v, c.Options().OffloadBytesPerSecond, err)
		}
	}
	if _, err := c.Set("managedLedgerOffloadFlowPermitsPerSecond", "fast"); !errors.As(err, &ce) || ce.Key != "managedLedgerOffloadFlowPermitsPerSecond" {
		t.Fatalf("bad throttle: %v", err)
	}
	for _, k := range ConfigKeys() {
		if known, _ := c.Set(k, ""); !known {
			t.Fatalf("ConfigKeys lists %s, which Set does not know", k)
		}
	}
}

func TestConfigEffective(t *testing.T) {
	c := configOf(t, "managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "s3b",
		"managedLedgerOffloadBucket", "universal", "s3ManagedLedgerOffloadServiceEndpoint", "http://127.0.0.1:9000")
	if b, key := c.EffectiveBucket(); b != "universal" || key != "managedLedgerOffloadBucket" {
		t.Fatalf("bucket %q from %s", b, key)
	}
	if e, key := c.EffectiveEndpoint(); e != "http://127.0.0.1:9000" || key != "s3ManagedLedgerOffloadServiceEndpoint" {
		t.Fatalf("endpoint %q from %s", e, key)
	}
	if n, _ := c.EffectiveMaxBlockSize(); n != DefaultMaxBlockSize {
		t.Fatalf("block size %d", n)
	}
	if o := c.Options(); o.PartSize != DefaultMaxBlockSize || o.ReadAheadBlocks != 1 {
		t.Fatalf("options %+v", o)
	}
}

// The filesystem driver (standalone's) opens a directory, creating it.
func TestOpenFilesystem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "offload")
	c := configOf(t, "managedLedgerOffloadDriver", "filesystem", "fileSystemURI", "file://"+dir)
	o, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	roundTrip(t, o, 1, randomPayloads(1, 50, 3000))
	if _, err := Open(context.Background(), configOf(t, "managedLedgerOffloadDriver", "nope"), nil); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Open with a bad driver: %v", err)
	}
}
