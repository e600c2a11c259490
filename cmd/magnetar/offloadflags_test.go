package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/offload"
)

func TestOffloadFlagNames(t *testing.T) {
	for key, want := range map[string]string{
		"managedLedgerOffloadDriver":            "managed-ledger-offload-driver",
		"s3ManagedLedgerOffloadServiceEndpoint": "s3-managed-ledger-offload-service-endpoint",
		"fileSystemURI":                         "file-system-uri",
		"managedLedgerMaxSizePerLedgerMbytes":   "managed-ledger-max-size-per-ledger-mbytes",
	} {
		if got := kebab(key); got != want {
			t.Errorf("kebab(%s) = %s, want %s", key, got, want)
		}
	}
}

// TestOffloadSettings: bad input names its key; standalone's filesystem default; the
// broker-level policy from the broker.conf keys.
func TestOffloadSettings(t *testing.T) {
	parse := func(t *testing.T, args ...string) *offloadFlags {
		t.Helper()
		var o offloadFlags
		f := pflag.NewFlagSet("x", pflag.ContinueOnError)
		o.add(f)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &o
	}
	for _, c := range []struct {
		args []string
		key  string
	}{
		{[]string{"--managed-ledger-offload-driver=tape"}, "managedLedgerOffloadDriver"},
		{[]string{"--managed-ledger-offload-driver=aws-s3"}, "s3ManagedLedgerOffloadBucket"},
		{[]string{"--managed-ledger-offload-driver=filesystem"}, "fileSystemURI"},
		{[]string{"--managed-ledger-offload-threshold-in-bytes=-5"}, "managedLedgerOffloadThresholdInBytes"},
		{[]string{"--managed-ledger-offload-deletion-lag-ms=x"}, "managedLedgerOffloadDeletionLagMs"},
		{[]string{"--managed-ledger-data-read-priority=sideways"}, "managedLedgerDataReadPriority"},
	} {
		_, _, err := parse(t, c.args...).settings("")
		var ce *offload.ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key {
			t.Errorf("%v: err %v, want one naming %s", c.args, err, c.key)
		}
	}
	// Off by default, Pulsar's broker defaults.
	cfg, pol, err := parse(t).settings("/data")
	if err != nil || cfg.Enabled() || pol.ThresholdBytes != -1 || pol.ThresholdAge != -1 || pol.DeletionLag != 4*time.Hour ||
		pol.ReadPriority != mledger.ReadTieredStorageFirst {
		t.Fatalf("defaults: %+v %+v %v", cfg, pol, err)
	}
	dir := t.TempDir()
	cfg, pol, err = parse(t, "--managed-ledger-offload-driver=filesystem", "--managed-ledger-offload-auto-trigger-size-threshold-bytes=100",
		"--managed-ledger-offload-threshold-in-seconds=60", "--managed-ledger-offload-deletion-lag-ms=0",
		"--managed-ledger-data-read-priority=bookkeeper-first").settings(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cfg.FileSystemDir(); got != filepath.Join(dir, "offload") {
		t.Fatalf("filesystem dir %q", got)
	}
	if pol != (mledger.OffloadPolicy{ThresholdBytes: 100, ThresholdAge: time.Minute, DeletionLag: 0, ReadPriority: mledger.ReadBookkeeperFirst}) {
		t.Fatalf("policy %+v", pol)
	}
	// open: a bad key is a usage error (exit 2); a filesystem offloader opens.
	if _, _, _, err := parse(t, "--managed-ledger-offload-driver=tape").open(t.Context(), ""); !errors.As(err, new(usageError)) {
		t.Fatalf("open with a bad driver: %v", err)
	}
	port, _, closeFn, err := parse(t, "--managed-ledger-offload-driver=filesystem").open(t.Context(), dir)
	if err != nil || port == nil || port.Driver() != "filesystem" {
		t.Fatalf("open filesystem: %v %v", port, err)
	}
	closeFn()
	// Rollover keys: only those given change the template.
	_, ls, _, err := parse(t, "--managed-ledger-max-entries-per-ledger=10", "--managed-ledger-min-ledger-rollover-time-minutes=1").open(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	ml := mledger.Config{MaxSizePerLedger: 7}
	ls.apply(&ml)
	if ml.MaxEntriesPerLedger != 10 || ml.MinLedgerRolloverTime != time.Minute || ml.MaxSizePerLedger != 7 || *ml.Offload != mledger.DefaultOffloadPolicy() &&
		ml.Offload.ReadPriority != mledger.ReadTieredStorageFirst {
		t.Fatalf("template %+v", ml)
	}
	if _, _, _, err := parse(t, "--managed-ledger-max-entries-per-ledger=0").open(t.Context(), ""); !errors.As(err, new(usageError)) ||
		!strings.Contains(err.Error(), "managedLedgerMaxEntriesPerLedger") {
		t.Fatalf("bad rollover: %v", err)
	}
}

// TestBrokerAndStandaloneTakeOffloadFlags: both commands register every offload flag (the
// broker command once did not, and crashed at start reading one).
func TestBrokerAndStandaloneTakeOffloadFlags(t *testing.T) {
	var o offloadFlags
	for name, c := range map[string]*cobra.Command{"broker": newBrokerCmd(), "standalone": newStandaloneCmd()} {
		for _, k := range o.keyNames() {
			if c.Flags().Lookup(kebab(k)) == nil {
				t.Errorf("%s has no --%s", name, kebab(k))
			}
		}
	}
}
