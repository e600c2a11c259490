package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/offload"
)

// offloadFlags are tiered storage's settings of the broker and standalone commands: every
// offloader key of Pulsar's broker.conf (offload.ConfigKeys: driver, bucket, region,
// endpoint, block sizes, read priority, filesystem keys, the offload throttle
// managedLedgerOffloadFlowPermitsPerSecond, …) and the broker-level offload
// policy (managedLedgerOffloadThresholdInBytes, …InSeconds, managedLedgerOffloadDeletionLagMs)
// and the ledger rollover keys (rolloverKeys),
// each a flag named by its key in kebab-case (--managed-ledger-offload-driver) so that
// --config files and flags both reach it.
type offloadFlags struct {
	vals   map[string]*string // by broker.conf key; "" leaves the default
	opened *offload.Offloader // the offloader open made (nil: none, offload off)
}

// offloadPolicyKeys are the broker-level offload policy keys (Pulsar's broker.conf names and
// the aliases its OffloadPoliciesImpl reads).
var offloadPolicyKeys = []string{
	"managedLedgerOffloadThresholdInBytes", "managedLedgerOffloadAutoTriggerSizeThresholdBytes",
	"managedLedgerOffloadThresholdInSeconds", "managedLedgerOffloadDeletionLagMs",
}

// rolloverKeys are broker.conf's ledger rollover keys: they decide when a ledger closes and
// so becomes offloadable. Unset, the managed ledger's defaults apply (50000 entries, 2 GiB,
// no minimum age, 4 h).
var rolloverKeys = []string{
	"managedLedgerMaxEntriesPerLedger", "managedLedgerMaxSizePerLedgerMbytes",
	"managedLedgerMinLedgerRolloverTimeMinutes", "managedLedgerMaxLedgerRolloverTimeMinutes",
}

// ledgerSettings are the managed-ledger settings of offloadFlags: the broker-level offload
// policy and the rollover settings given (0: the managed ledger's default).
type ledgerSettings struct {
	policy                   mledger.OffloadPolicy
	maxEntries, maxSize      int64
	minRollover, maxRollover time.Duration
}

// apply puts the settings into the broker's managed-ledger template.
func (ls ledgerSettings) apply(c *mledger.Config) {
	p := ls.policy
	if p == (mledger.OffloadPolicy{}) {
		p = mledger.DefaultOffloadPolicy()
	}
	c.Offload = &p
	if ls.maxEntries > 0 {
		c.MaxEntriesPerLedger = ls.maxEntries
	}
	if ls.maxSize > 0 {
		c.MaxSizePerLedger = ls.maxSize
	}
	if ls.minRollover > 0 {
		c.MinLedgerRolloverTime = ls.minRollover
	}
	if ls.maxRollover > 0 {
		c.MaxLedgerRolloverTime = ls.maxRollover
	}
}

// kebab turns a broker.conf key into its flag name: managedLedgerOffloadDriver →
// managed-ledger-offload-driver, s3ManagedLedgerOffloadRegion → s3-managed-ledger-offload-region,
// fileSystemURI → file-system-uri (a run of capitals is one word).
func kebab(key string) string {
	rs := []rune(key)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && !unicode.IsUpper(rs[i-1])
			wordStart := i > 0 && unicode.IsUpper(rs[i-1]) && i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || wordStart {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (o *offloadFlags) keyNames() []string {
	return slices.Concat(offload.ConfigKeys(), offloadPolicyKeys, rolloverKeys)
}

func (o *offloadFlags) add(f *pflag.FlagSet) {
	o.vals = map[string]*string{}
	for _, k := range o.keyNames() {
		v := new(string)
		o.vals[k] = v
		f.StringVar(v, kebab(k), "", "tiered storage: broker.conf's "+k)
	}
}

// keys are the broker.conf keys of the flags.
func (o *offloadFlags) keys() []config.Key {
	var ks []config.Key
	for _, k := range o.keyNames() {
		ks = append(ks, config.Key{Name: k, Flag: kebab(k), Secret: k == "s3ManagedLedgerOffloadCredentialSecret"})
	}
	return ks
}

// settings returns the offloader configuration and the broker-level offload policy, checked
// (offload.Config.Validate): a bad value is a *offload.ConfigError naming its key. dataDir
// is standalone's data directory: with the filesystem driver and no fileSystemURI, the
// objects go to <dataDir>/offload ("": no such default, the broker's).
func (o *offloadFlags) settings(dataDir string) (offload.Config, mledger.OffloadPolicy, error) {
	cfg := offload.Defaults()
	pol := mledger.DefaultOffloadPolicy()
	pol.ReadPriority = mledger.ReadTieredStorageFirst // Pulsar's managedLedgerDataReadPriority default
	for _, k := range offload.ConfigKeys() {
		if _, err := cfg.Set(k, *o.vals[k]); err != nil {
			return cfg, pol, err
		}
	}
	if strings.EqualFold(strings.TrimSpace(cfg.Driver), offload.DriverFilesystem) && strings.TrimSpace(cfg.FileSystemURI) == "" && dataDir != "" {
		cfg.FileSystemURI = filepath.Join(dataDir, "offload")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, pol, err
	}
	if cfg.ReadPriority == offload.BookKeeperFirst {
		pol.ReadPriority = mledger.ReadBookkeeperFirst
	}
	num := func(key string, set func(n int64)) error {
		v := strings.TrimSpace(*o.vals[key])
		if v == "" {
			return nil
		}
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil || n < -1 {
			return &offload.ConfigError{Key: key, Value: v, Reason: "want -1 (off) or a number of 0 or more"}
		}
		set(n)
		return nil
	}
	dur := func(n int64, unit time.Duration) time.Duration {
		if n < 0 {
			return -1
		}
		return time.Duration(n) * unit
	}
	err := errors.Join(
		num("managedLedgerOffloadAutoTriggerSizeThresholdBytes", func(n int64) { pol.ThresholdBytes = n }),
		num("managedLedgerOffloadThresholdInBytes", func(n int64) { pol.ThresholdBytes = n }),
		num("managedLedgerOffloadThresholdInSeconds", func(n int64) { pol.ThresholdAge = dur(n, time.Second) }),
		num("managedLedgerOffloadDeletionLagMs", func(n int64) { pol.DeletionLag = dur(n, time.Millisecond) }),
	)
	if err != nil {
		var ce *offload.ConfigError
		errors.As(err, &ce)
		return cfg, pol, ce
	}
	return cfg, pol, nil
}

// rollover reads the rollover keys given.
func (o *offloadFlags) rollover(ls *ledgerSettings) error {
	for _, k := range rolloverKeys {
		v := strings.TrimSpace(*o.vals[k])
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return &offload.ConfigError{Key: k, Value: v, Reason: "want a positive integer"}
		}
		switch k {
		case "managedLedgerMaxEntriesPerLedger":
			ls.maxEntries = n
		case "managedLedgerMaxSizePerLedgerMbytes":
			ls.maxSize = n << 20
		case "managedLedgerMinLedgerRolloverTimeMinutes":
			ls.minRollover = time.Duration(n) * time.Minute
		case "managedLedgerMaxLedgerRolloverTimeMinutes":
			ls.maxRollover = time.Duration(n) * time.Minute
		}
	}
	return nil
}

// open checks the settings (a bad one is a usage error naming the key: exit 2) and, when a
// driver is configured, opens the offloader. The returned port is nil with offload off;
// close releases the offloader (after the broker stopped).
func (o *offloadFlags) open(ctx context.Context, dataDir string) (port mledger.Offloader, ls ledgerSettings, closeFn func(), err error) {
	cfg, pol, err := o.settings(dataDir)
	if err == nil {
		err = o.rollover(&ls)
	}
	ls.policy = pol
	if err != nil {
		return nil, ls, func() {}, usageError{err}
	}
	if !cfg.Enabled() {
		return nil, ls, func() {}, nil
	}
	off, err := offload.Open(ctx, cfg, nil) // its metrics go to the broker's registry: registerMetrics
	if err != nil {
		var ce *offload.ConfigError
		if errors.As(err, &ce) {
			return nil, ls, func() {}, usageError{err}
		}
		return nil, ls, func() {}, fmt.Errorf("offloader: %w", err)
	}
	o.opened = off
	return offload.NewManagedLedgerPort(off, cfg.Driver), ls, func() { off.Close() }, nil
}

// registerMetrics registers the metrics of the offloader open made (offloaded bytes, errors,
// offload and read latency, reads served from object storage, the block cache) on the
// broker's registry, which its /metrics serves; with offload off it does nothing.
func (o *offloadFlags) registerMetrics(reg prometheus.Registerer) error {
	if o.opened == nil {
		return nil
	}
	if err := reg.Register(o.opened.Collector()); err != nil {
		return fmt.Errorf("offloader metrics: %w", err)
	}
	return nil
}
