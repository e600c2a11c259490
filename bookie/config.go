package bookie

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/metadata"
)

// Config configures a bookie. Zero values take the defaults documented on each field.
type Config struct {
	// ID is the bookie id recorded in ledger ensembles and in the cookie. Default: the
	// advertised address.
	ID string
	// Listen is the TCP address the protocol server listens on (e.g. 127.0.0.1:3181).
	Listen string
	// Advertise is the address clients dial. Default: the bound listen address.
	Advertise string
	// TLS, if set, makes the protocol listener TLS-only (see package tlsconf): every client
	// of the bookie must then dial TLS (BookieDial, DialTLS). DialLocal stays in process.
	TLS *tls.Config
	// DataDir holds the cookie, journal, entry logs and index.
	DataDir string
	// Store is the metadata store. Required.
	Store metadata.Store
	// SessionTTL bounds how long the registration outlives a dead process. Default 10s.
	SessionTTL time.Duration
	// DiskThreshold is the fraction of the data dir's file system in use above which the
	// bookie turns read-only. Default 0.95. It turns writable again below DiskThreshold-0.05.
	DiskThreshold float64
	// DiskCheckInterval is how often disk usage is checked. Default 5s.
	DiskCheckInterval time.Duration
	// DiskUsage reports the used fraction of the data dir's file system. Default: statfs.
	// Tests replace it to drive read-only mode.
	DiskUsage func(dir string) (float64, error)
	// GCInterval is how often entries of ledgers deleted from metadata are reclaimed.
	// Default 10m; negative disables the periodic run (GC can still be called).
	GCInterval time.Duration
	// CheckpointInterval is how often storage is flushed and old journal files released.
	// Default 30s.
	CheckpointInterval time.Duration
	// MaxEntrySize is the largest entry accepted. Default 5 MiB.
	MaxEntrySize int
	// Journal tunes the journal. A zero MaxGroupWait takes journal.DefaultMaxGroupWait (1ms);
	// a negative one syncs as soon as the queue is empty. A zero MinSyncInterval takes
	// journal.DefaultMinSyncInterval (750µs); a negative one does not pace.
	Journal journal.Options
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger

	// storageFS replaces the storage's filesystem (tests inject failures). Default vfs.Default.
	storageFS vfs.FS
}

func (c *Config) setDefaults() error {
	if c.Store == nil {
		return errors.New("bookie: config: metadata store required")
	}
	if c.DataDir == "" {
		return errors.New("bookie: config: data dir required")
	}
	if c.Listen == "" {
		return errors.New("bookie: config: listen address required")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("bookie: config: listen address %q: %w", c.Listen, err)
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 10 * time.Second
	}
	if c.DiskThreshold == 0 {
		c.DiskThreshold = 0.95
	}
	if c.DiskThreshold <= 0 || c.DiskThreshold > 1 {
		return fmt.Errorf("bookie: config: disk threshold %v not in (0,1]", c.DiskThreshold)
	}
	if c.DiskCheckInterval == 0 {
		c.DiskCheckInterval = 5 * time.Second
	}
	if c.DiskUsage == nil {
		c.DiskUsage = diskUsage
	}
	if c.GCInterval == 0 {
		c.GCInterval = 10 * time.Minute
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 30 * time.Second
	}
	if c.MaxEntrySize == 0 {
		c.MaxEntrySize = 5 << 20
	}
	if c.Journal.MaxGroupWait == 0 {
		c.Journal.MaxGroupWait = journal.DefaultMaxGroupWait
	}
	if c.Journal.MinSyncInterval == 0 {
		c.Journal.MinSyncInterval = journal.DefaultMinSyncInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
