package mledger

import (
	"fmt"
	"time"
)

// Config configures one managed ledger. Zero values take the documented defaults.
type Config struct {
	// Ensemble, WriteQuorum and AckQuorum of every data and cursor ledger. Default 2/2/2.
	Ensemble, WriteQuorum, AckQuorum int
	// Password of the ledgers (bookies check it on every add).
	Password []byte

	// MaxEntriesPerLedger rolls the current ledger over when it holds this many entries.
	// Default 50000.
	MaxEntriesPerLedger int64
	// MaxSizePerLedger rolls it over at this many payload bytes. Default 2 GiB.
	MaxSizePerLedger int64
	// MinLedgerRolloverTime: a ledger younger than this does not roll over for entries or
	// size (0: no minimum). Default 0.
	MinLedgerRolloverTime time.Duration
	// MaxLedgerRolloverTime rolls a non-empty ledger over at this age (<0: never). Default 4h.
	MaxLedgerRolloverTime time.Duration

	// RetentionTime keeps consumed ledgers this long after they were closed (<0: forever,
	// 0: none). RetentionSize keeps consumed ledgers while the log is at most this many bytes
	// (<0: unlimited, 0: none). A consumed ledger is deleted when either allows it.
	RetentionTime time.Duration
	RetentionSize int64
	// TrimInterval is how often consumed ledgers are checked for deletion (besides after
	// every cursor persist and rollover). Default 1m.
	TrimInterval time.Duration

	// CursorMaxEntriesPerLedger switches a cursor to a new ledger after this many states.
	// Default 10000.
	CursorMaxEntriesPerLedger int
	// CursorSnapshotInterval is how often a changed cursor state is also written into the
	// cursor's metadata record. Default 1m.
	CursorSnapshotInterval time.Duration
	// MaxUnackedRangesToPersist bounds the individually acknowledged ranges persisted per
	// state; more are kept in memory only (redelivered after a crash). Default 10000.
	MaxUnackedRangesToPersist int
	// MaxMarkDeleteRate bounds how many times a second each durable cursor persists its
	// state (Pulsar's managedLedgerMaxMarkDeleteRate; <= 0: unlimited, the default here — the
	// broker's default is Pulsar's 1.0). Changes beyond it are held in memory until the next
	// persist, the flush timer, Flush or close (markdelete.go).
	MaxMarkDeleteRate float64
	// CursorFlushInterval is how often held cursor states are persisted (Pulsar's
	// managedLedgerCursorPositionFlushSeconds). Default 60s.
	CursorFlushInterval time.Duration

	// CacheSize bounds the bytes of recently added entries kept for tailing reads.
	// Default 8 MiB; <0 disables the cache.
	CacheSize int64
	// RetryBackoff is the first delay before retrying a failed metadata or ledger operation
	// (doubling up to 32×). Default 50ms.
	RetryBackoff time.Duration
	// OpenAttempts bounds retries of each step of opening. Default 10.
	OpenAttempts int

	// Offloader copies closed ledgers to an object store (tiered storage) and reads them back.
	// nil: the Factory's (FactoryOptions.Offloader); nil there too: offload is off — no ledger
	// is offloaded and Offload below is ignored (ledgers an earlier configuration offloaded
	// stay readable only through an Offloader).
	Offloader Offloader
	// Offload is when ledgers are offloaded, when their bookie copy is deleted, and where
	// reads go (SetOffloadPolicy changes it live). Default (nil): DefaultOffloadPolicy — only
	// when asked (ManagedLedger.Offload). A pointer, because Pulsar's values make the zero
	// value the most eager policy (offload every closed ledger and delete its bookie copy at
	// once).
	Offload *OffloadPolicy

	// MustExist makes Open fail with ErrNotFound instead of creating a new managed ledger.
	MustExist bool
	// Properties are set on a newly created managed ledger.
	Properties map[string]string
}

func (c Config) withDefaults() Config {
	if c.Ensemble == 0 && c.WriteQuorum == 0 && c.AckQuorum == 0 {
		c.Ensemble, c.WriteQuorum, c.AckQuorum = 2, 2, 2
	}
	if c.MaxEntriesPerLedger <= 0 {
		c.MaxEntriesPerLedger = 50000
	}
	if c.MaxSizePerLedger <= 0 {
		c.MaxSizePerLedger = 2 << 30
	}
	if c.MaxLedgerRolloverTime == 0 {
		c.MaxLedgerRolloverTime = 4 * time.Hour
	}
	if c.TrimInterval <= 0 {
		c.TrimInterval = time.Minute
	}
	if c.CursorMaxEntriesPerLedger <= 0 {
		c.CursorMaxEntriesPerLedger = 10000
	}
	if c.CursorSnapshotInterval <= 0 {
		c.CursorSnapshotInterval = time.Minute
	}
	if c.CursorFlushInterval <= 0 {
		c.CursorFlushInterval = time.Minute
	}
	if c.MaxUnackedRangesToPersist <= 0 {
		c.MaxUnackedRangesToPersist = 10000
	}
	if c.CacheSize == 0 {
		c.CacheSize = 8 << 20
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 50 * time.Millisecond
	}
	if c.OpenAttempts <= 0 {
		c.OpenAttempts = 10
	}
	if c.Offload == nil {
		p := DefaultOffloadPolicy()
		c.Offload = &p
	}
	return c
}

func (c Config) validate() error {
	if c.Ensemble < c.WriteQuorum || c.WriteQuorum < c.AckQuorum || c.AckQuorum < 1 {
		return fmt.Errorf("%w: quorum E=%d WQ=%d AQ=%d", ErrInvalidArgument, c.Ensemble, c.WriteQuorum, c.AckQuorum)
	}
	if c.Offload != nil {
		return c.Offload.validate()
	}
	return nil
}
