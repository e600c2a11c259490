package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

func init() { register(newLedgerCmd) }

// ledgerFlags are the flags every ledger tool shares.
type ledgerFlags struct {
	metaURL  string
	password string
	out      outputFlag
}

func (f *ledgerFlags) add(c *cobra.Command) {
	addMetadataFlag(c, &f.metaURL)
	c.Flags().StringVar(&f.password, "password", "", "ledger password")
	f.out.add(c)
}

// ledgerEnv is an open metadata store and ledger client.
type ledgerEnv struct {
	store  metadata.Store
	pool   *client.Pool
	client *ledger.Client
}

func (f *ledgerFlags) open(ctx context.Context) (*ledgerEnv, error) {
	if err := f.out.validate(); err != nil {
		return nil, err
	}
	store, err := openStore(ctx, f.metaURL)
	if err != nil {
		return nil, err
	}
	pool := client.NewPool(client.Options{Logger: slog.Default()})
	return &ledgerEnv{store: store, pool: pool, client: ledger.NewClient(store, pool, ledger.Options{Logger: slog.Default()})}, nil
}

func (e *ledgerEnv) Close() {
	e.client.Close()
	e.pool.Close()
	e.store.Close()
}

// quorumFlags are --ensemble/--write-quorum/--ack-quorum/--digest.
type quorumFlags struct {
	e, wq, aq int
	digest    string
}

func (q *quorumFlags) add(c *cobra.Command) {
	c.Flags().IntVar(&q.e, "ensemble", 3, "ensemble size E")
	c.Flags().IntVar(&q.wq, "write-quorum", 2, "write quorum WQ")
	c.Flags().IntVar(&q.aq, "ack-quorum", 2, "ack quorum AQ")
	c.Flags().StringVar(&q.digest, "digest", "crc32c", "entry digest: crc32c or none")
}

func (q *quorumFlags) options(password string) (ledger.CreateOptions, error) {
	if !(q.e >= q.wq && q.wq >= q.aq && q.aq >= 1) {
		return ledger.CreateOptions{}, usageError{fmt.Errorf("need ensemble >= write-quorum >= ack-quorum >= 1, got %d/%d/%d", q.e, q.wq, q.aq)}
	}
	var d ledger.Digest
	switch strings.ToLower(q.digest) {
	case "crc32c":
		d = ledger.DigestCRC32C
	case "none":
		d = ledger.DigestNone
	default:
		return ledger.CreateOptions{}, usageError{fmt.Errorf("--digest must be crc32c or none, not %q", q.digest)}
	}
	return ledger.CreateOptions{Ensemble: q.e, WriteQuorum: q.wq, AckQuorum: q.aq, Digest: d, Password: []byte(password)}, nil
}

func parseLedgerID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 {
		return 0, usageError{fmt.Errorf("ledger id must be a non-negative integer, not %q", s)}
	}
	return id, nil
}

// ledgerView is what the tools print of a ledger's metadata (the password is left out).
type ledgerView struct {
	LedgerID     int64             `json:"ledgerId"`
	State        string            `json:"state"`
	EnsembleSize int               `json:"ensembleSize"`
	WriteQuorum  int               `json:"writeQuorum"`
	AckQuorum    int               `json:"ackQuorum"`
	Digest       string            `json:"digest"`
	LastEntryID  int64             `json:"lastEntryId"`
	Length       int64             `json:"length"`
	Ensembles    []ledger.Ensemble `json:"ensembles"`
	CTime        time.Time         `json:"ctime"`
}

func viewOf(m *ledger.Metadata) ledgerView {
	return ledgerView{LedgerID: m.LedgerID, State: m.State.String(), EnsembleSize: m.EnsembleSize,
		WriteQuorum: m.WriteQuorum, AckQuorum: m.AckQuorum, Digest: m.Digest.String(), LastEntryID: m.LastEntryID,
		Length: m.Length, Ensembles: m.Ensembles, CTime: time.UnixMilli(m.CTime).UTC()}
}

func printLedgers(out outputFlag, vs []ledgerView) error {
	if out.json() {
		if vs == nil {
			vs = []ledgerView{}
		}
		return printJSON(os.Stdout, vs)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEDGER\tSTATE\tE/WQ/AQ\tLAST ENTRY\tLENGTH\tENSEMBLES")
	for _, v := range vs {
		var ens []string
		for _, e := range v.Ensembles {
			ens = append(ens, fmt.Sprintf("%d:%s", e.FirstEntry, strings.Join(e.Bookies, ",")))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d/%d/%d\t%d\t%d\t%s\n", v.LedgerID, v.State, v.EnsembleSize, v.WriteQuorum,
			v.AckQuorum, v.LastEntryID, v.Length, strings.Join(ens, " "))
	}
	return tw.Flush()
}

// readLedgerMeta reads one ledger's metadata record.
func readLedgerMeta(ctx context.Context, store metadata.Store, id int64) (*ledger.Metadata, error) {
	kv, err := store.Get(ctx, metadata.LedgerKey(id))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ledger.ErrNoSuchLedger, id)
	}
	if err != nil {
		return nil, err
	}
	return ledger.UnmarshalMetadata(kv.Value)
}

// runOnLedger parses the ledger id argument, opens the ledger client for at most timeout and
// runs fn.
func (f *ledgerFlags) runOnLedger(cmd *cobra.Command, args []string, timeout time.Duration,
	fn func(ctx context.Context, env *ledgerEnv, id int64) error) error {
	id, err := parseLedgerID(args[0])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	env, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer env.Close()
	return fn(ctx, env, id)
}

// printLedger prints one ledger: a JSON object, or a table row.
func printLedger(out outputFlag, v ledgerView) error {
	if out.json() {
		return printJSON(os.Stdout, v)
	}
	return printLedgers(out, []ledgerView{v})
}

func newLedgerCmd() *cobra.Command {
	c := &cobra.Command{Use: "ledger", Short: "Create, write, read, inspect, recover and delete ledgers"}
	c.AddCommand(newLedgerCreateCmd(), newLedgerWriteCmd(), newLedgerReadCmd(), newLedgerShowCmd(),
		newLedgerListCmd(), newLedgerRecoverCmd(), newLedgerDeleteCmd())
	return c
}

func newLedgerCreateCmd() *cobra.Command {
	var f ledgerFlags
	var q quorumFlags
	c := &cobra.Command{
		Use: "create", Short: "Create an empty ledger (left OPEN) and print its id", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := q.options(f.password)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			env, err := f.open(ctx)
			if err != nil {
				return err
			}
			defer env.Close()
			h, err := env.client.Create(ctx, opts)
			if err != nil {
				return err
			}
			if f.out.json() {
				return printJSON(os.Stdout, map[string]any{"ledgerId": h.ID()})
			}
			fmt.Printf("created ledger %d\n", h.ID())
			return nil
		},
	}
	f.add(c)
	q.add(c)
	return c
}

func newLedgerWriteCmd() *cobra.Command {
	var f ledgerFlags
	var q quorumFlags
	var count, size int
	c := &cobra.Command{
		Use: "write", Short: "Create a ledger, write N entries, close it", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := q.options(f.password)
			if err != nil {
				return err
			}
			if count < 0 || size < 0 {
				return usageError{fmt.Errorf("--count and --size must not be negative")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			env, err := f.open(ctx)
			if err != nil {
				return err
			}
			defer env.Close()
			h, err := env.client.Create(ctx, opts)
			if err != nil {
				return err
			}
			payload := make([]byte, size)
			acked, last := 0, int64(-1)
			var firstErr error
			done := make(chan struct{}, count)
			start := time.Now()
			for i := 0; i < count; i++ {
				p := append([]byte(nil), payload...)
				copy(p, fmt.Sprintf("%d", i))
				h.AppendAsync(ctx, p, func(id int64, err error) {
					if err == nil {
						acked++
						last = id
					} else if firstErr == nil {
						firstErr = err
					}
					done <- struct{}{}
				})
			}
			for i := 0; i < count; i++ {
				<-done
			}
			closeErr := h.Close(ctx)
			if !f.out.json() {
				fmt.Fprintf(os.Stderr, "wrote %d entries of %d B in %v\n", acked, size, time.Since(start).Round(time.Millisecond))
			}
			res := map[string]any{"ledgerId": h.ID(), "acked": acked, "lastEntryId": last}
			if f.out.json() {
				printJSON(os.Stdout, res)
			} else {
				fmt.Printf("ledger %d: %d entries acknowledged, last entry %d\n", h.ID(), acked, last)
			}
			return errors.Join(firstErr, closeErr)
		},
	}
	f.add(c)
	q.add(c)
	c.Flags().IntVar(&count, "count", 100, "entries to write")
	c.Flags().IntVar(&size, "size", 1024, "entry payload size in bytes")
	return c
}

func newLedgerReadCmd() *cobra.Command {
	var f ledgerFlags
	var from, to int64
	var countOnly bool
	c := &cobra.Command{
		Use: "read ID", Short: "Read and verify a ledger's entries (up to the LAC of an open ledger)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseLedgerID(args[0])
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			env, err := f.open(ctx)
			if err != nil {
				return err
			}
			defer env.Close()
			h, err := env.client.Open(ctx, id, ledger.OpenOptions{Password: []byte(f.password)})
			if err != nil {
				return err
			}
			defer h.Close(ctx)
			end := h.LAC()
			if m := h.Metadata(); m.State == ledger.StateClosed {
				end = m.LastEntryID
			}
			if to >= 0 && to < end {
				end = to
			}
			n := 0
			type row struct {
				EntryID int64  `json:"entryId"`
				Length  int    `json:"length"`
				Payload string `json:"payload"`
			}
			var rows []row
			for start := max(from, 0); start <= end; start += 1000 {
				stopAt := min(start+999, end)
				es, err := h.Read(ctx, start, stopAt)
				if err != nil {
					return fmt.Errorf("read %d..%d: %w", start, stopAt, err)
				}
				for _, e := range es {
					n++
					if countOnly {
						continue
					}
					if f.out.json() {
						rows = append(rows, row{e.EntryID, len(e.Payload), string(e.Payload)})
					} else {
						fmt.Printf("%d\t%d B\t%q\n", e.EntryID, len(e.Payload), preview(e.Payload))
					}
				}
			}
			switch {
			case countOnly && f.out.json():
				return printJSON(os.Stdout, map[string]any{"ledgerId": id, "count": n})
			case countOnly:
				fmt.Println(n)
			case f.out.json():
				if rows == nil {
					rows = []row{}
				}
				return printJSON(os.Stdout, rows)
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().Int64Var(&from, "from", 0, "first entry")
	c.Flags().Int64Var(&to, "to", -1, "last entry (default: the last readable)")
	c.Flags().BoolVar(&countOnly, "count-only", false, "print only the number of entries read")
	return c
}

func preview(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

func newLedgerShowCmd() *cobra.Command {
	var f ledgerFlags
	c := &cobra.Command{
		Use: "show ID", Short: "Print a ledger's metadata", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.runOnLedger(cmd, args, 30*time.Second, func(ctx context.Context, env *ledgerEnv, id int64) error {
				m, err := readLedgerMeta(ctx, env.store, id)
				if err != nil {
					return err
				}
				return printLedger(f.out, viewOf(m))
			})
		},
	}
	f.add(c)
	return c
}

func newLedgerListCmd() *cobra.Command {
	var f ledgerFlags
	c := &cobra.Command{
		Use: "list", Short: "List ledgers and their metadata", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.out.validate(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			store, err := openStore(ctx, f.metaURL)
			if err != nil {
				return err
			}
			defer store.Close()
			kvs, _, err := store.List(ctx, metadata.PrefixLedgers)
			if err != nil {
				return err
			}
			var vs []ledgerView
			for _, kv := range kvs {
				m, err := ledger.UnmarshalMetadata(kv.Value)
				if err != nil {
					return fmt.Errorf("%s: %w", kv.Key, err)
				}
				vs = append(vs, viewOf(m))
			}
			return printLedgers(f.out, vs)
		},
	}
	f.add(c)
	return c
}

func newLedgerRecoverCmd() *cobra.Command {
	var f ledgerFlags
	c := &cobra.Command{
		Use: "recover ID", Short: "Fence and close a ledger at its last recoverable entry", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.runOnLedger(cmd, args, 5*time.Minute, func(ctx context.Context, env *ledgerEnv, id int64) error {
				h, err := env.client.Open(ctx, id, ledger.OpenOptions{Recovery: true, Password: []byte(f.password)})
				if err != nil {
					return err
				}
				defer h.Close(ctx)
				return printLedger(f.out, viewOf(h.Metadata()))
			})
		},
	}
	f.add(c)
	return c
}

func newLedgerDeleteCmd() *cobra.Command {
	var f ledgerFlags
	c := &cobra.Command{
		Use: "delete ID", Short: "Delete a ledger (bookies reclaim its entries in garbage collection)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.runOnLedger(cmd, args, 30*time.Second, func(ctx context.Context, env *ledgerEnv, id int64) error {
				if err := env.client.Delete(ctx, id); err != nil {
					return err
				}
				if f.out.json() {
					return printJSON(os.Stdout, map[string]any{"ledgerId": id, "deleted": true})
				}
				fmt.Printf("deleted ledger %d\n", id)
				return nil
			})
		},
	}
	f.add(c)
	return c
}
