package topic

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Position and Entry are the managed ledger's.
type (
	Position = mledger.Position
	Entry    = mledger.Entry
)

// Log is a topic's view of its managed ledger. The broker binds it to *mledger.ManagedLedger
// (see broker/topicreg/mlog.go); tests bind it to an in-memory log. Implementations are safe for concurrent
// use. Errors wrap the mledger sentinels (ErrTerminated, ErrFenced, ErrClosed,
// ErrNoMoreEntries, ErrCursorNotFound).
type Log interface {
	// AddAsync appends data; cb is called exactly once, in add order, on a goroutine that must
	// not block (the topic only queues an event).
	AddAsync(data []byte, cb func(Position, error))
	// SetMaxRead bounds what cursors read to the entries before p (nil: unbounded); it
	// takes effect before any later AddAsync.
	SetMaxRead(p *Position)
	// LastConfirmed is the position of the last durable entry (EntryID -1: none in the
	// current ledger).
	LastConfirmed() Position
	// Read returns up to max entries from the first at or after from, waiting for one.
	Read(ctx context.Context, from Position, max int) ([]Entry, error)
	// Terminate seals the log and returns its last position.
	Terminate(ctx context.Context) (Position, error)
	// Stats returns the log's ledger chain and properties.
	Stats(ctx context.Context) (mledger.Stats, error)
	// SetProperty records a property in the log's metadata (empty value: remove).
	SetProperty(ctx context.Context, key, value string) error
	// Cursors lists the durable cursors (subscriptions) the log recovered or created.
	Cursors(ctx context.Context) ([]string, error)
	// OpenCursor opens or creates durable cursor name; a new one starts at start (Earliest,
	// Latest or the first position to deliver).
	OpenCursor(ctx context.Context, name string, start Position) (Cursor, error)
	// OpenNonDurableCursor opens an in-memory cursor whose first entry is start.
	OpenNonDurableCursor(ctx context.Context, start Position) (Cursor, error)
	// DeleteCursor removes durable cursor name and its state.
	DeleteCursor(ctx context.Context, name string) error
	// Close closes the log (and its cursors). Delete closes and deletes it with its data.
	Close(ctx context.Context) error
	Delete(ctx context.Context) error
}

// Cursor is a subscription's position on the log. Safe for concurrent use.
type Cursor interface {
	// Read returns up to max entries from the read position, skipping acknowledged ones,
	// and advances the read position; it waits until one is available.
	Read(ctx context.Context, max int) ([]Entry, error)
	// ReadPositions re-reads the given positions, skipping acknowledged ones.
	ReadPositions(ctx context.Context, ps []Position) ([]Entry, error)
	// Ack, AckCumulative and AckBatch acknowledge; done (may be nil) is called once the
	// state is applied (not necessarily persisted), from any goroutine.
	Ack(ps []Position, done func(error))
	AckCumulative(p Position, done func(error))
	AckBatch(p Position, idx, size int, done func(error))
	// BatchAcked returns which messages of the batch entry at p are acknowledged (nil: none
	// recorded, or the whole entry is).
	BatchAcked(ctx context.Context, p Position) ([]bool, error)
	// Reset moves the cursor so that p (Earliest, Latest or a position) is the next entry
	// delivered, dropping the acknowledgements at or after it.
	Reset(ctx context.Context, p Position) error
	// MarkDelete is the mark-delete position: everything at or before it is acknowledged.
	MarkDelete(ctx context.Context) (Position, error)
	// Info returns the cursor's statistics.
	Info(ctx context.Context) (CursorInfo, error)
	// Acked reports whether the whole entry at p is acknowledged.
	Acked(ctx context.Context, p Position) (bool, error)
	// Flush waits until every acknowledgement given before it is durable.
	Flush(ctx context.Context) error
	// Close releases the cursor (a durable one keeps its state).
	Close(ctx context.Context) error
}

// PropertyCursor is a Cursor that keeps properties with its persisted state (package
// mledger's cursors; CursorInfo.Properties lists them). A replicated subscription keeps its
// flag there (replsub.CursorProperty), so a reload finds it.
type PropertyCursor interface {
	Cursor
	// SetProperty sets property key to value and RemoveProperty removes it; each returns
	// once the change is durable.
	SetProperty(ctx context.Context, key string, value int64) error
	RemoveProperty(ctx context.Context, key string) error
}

// CursorInfo describes a cursor for the statistics.
type CursorInfo struct {
	MarkDelete Position
	// PersistedMarkDelete is the mark-delete position known durable; MarkDeleteHeld: a newer
	// state waits for the mark-delete rate (managedLedgerMaxMarkDeleteRate).
	PersistedMarkDelete Position
	MarkDeleteHeld      bool
	ReadPosition        Position
	Backlog             int64
	// AckedRanges is the number of individually acknowledged ranges above MarkDelete.
	AckedRanges int
	// PartialBatches is the number of batch entries with some messages acknowledged.
	PartialBatches int
	// Acked lists them as "[l:f..l:t]" strings, for internal stats.
	Acked       string
	Ledger      int64
	State       string
	Properties  map[string]int64
	LastActive  time.Time
	ReadWaiting bool
	// Dropped and DropRate count the messages a non-persistent log dropped before this
	// cursor read them (total, and per second lately).
	Dropped  int64
	DropRate float64
}

// Conn is the client connection producers and consumers live on, as a topic and its
// subscriptions see it. Implementations are safe for concurrent use and never block for
// long: frames are queued for the connection's writer.
type Conn interface {
	// Send queues a command.
	Send(cmd *pb.BaseCommand)
	// SendMessage queues a MESSAGE carrying a stored entry (headersAndPayload).
	SendMessage(cmd *pb.BaseCommand, headersAndPayload []byte)
	// ProducerClosed and ConsumerClosed forget a producer or consumer the topic closed on
	// its side; they are called before the matching CLOSE_PRODUCER/CLOSE_CONSUMER is sent,
	// so the client may reuse the id at once.
	ProducerClosed(p *Producer)
	ConsumerClosed(c *Consumer)
	// PublishDone releases the connection's pending-publish budget for one SEND.
	PublishDone()
	// RemoteAddr and ClientVersion describe the client for the statistics.
	RemoteAddr() string
	ClientVersion() string
}
