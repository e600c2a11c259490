package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/perf"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// The Pulsar perf tools: `magnetar perf produce|consume|e2e`, the flags of package perf's
// engine (perf.Run).

// perfClientFlags are the flags every Pulsar perf tool shares.
type perfClientFlags struct {
	serviceFlags
	duration time.Duration
	warmup   time.Duration
	window   time.Duration
	out      outputFlag
}

func (f *perfClientFlags) add(c *cobra.Command) {
	addServiceFlags(c, &f.serviceFlags)
	c.Flags().DurationVarP(&f.duration, "duration", "d", 10*time.Second, "measured time after the warm-up (with --messages: a limit, 0 = none)")
	c.Flags().DurationVar(&f.warmup, "warmup", 2*time.Second, "time before the measurement starts")
	c.Flags().DurationVar(&f.window, "window", 0, "report rates and latency percentiles per window of this length, as the OpenMessaging Benchmark does (0: none)")
	f.out.add(c)
}

func (f *perfClientFlags) validate(messages int64) error {
	if err := f.out.validate(); err != nil {
		return err
	}
	if f.warmup < 0 || f.duration < 0 || (f.duration == 0 && messages <= 0) {
		return usageError{errors.New("--duration must be positive (or 0 with --messages), --warmup not negative")}
	}
	if f.window != 0 && f.window < time.Second {
		return usageError{errors.New("--window must be at least 1s (or 0: none)")}
	}
	if messages < 0 {
		return usageError{errors.New("--messages must not be negative")}
	}
	return nil
}

// perfProducerFlags configure the publishing side.
type perfProducerFlags struct {
	producers  int
	size       int
	rate       float64
	maxPending int
	sync       bool
	messages   int64
	noBatching bool
	batchMax   int
	batchDelay time.Duration
	inFlight   int
	keys       int
}

func (f *perfProducerFlags) add(c *cobra.Command) {
	c.Flags().IntVar(&f.producers, "producers", 1, "number of producers (each on its own connection)")
	c.Flags().IntVarP(&f.size, "size", "s", 1024, "message size in bytes")
	c.Flags().Float64VarP(&f.rate, "rate", "r", 0, "total publish rate in msg/s (0: as fast as possible)")
	c.Flags().IntVar(&f.maxPending, "max-pending", 500, "messages in flight per producer (async mode)")
	c.Flags().BoolVar(&f.sync, "sync", false, "synchronous sends: one message in flight per producer")
	c.Flags().Int64VarP(&f.messages, "messages", "m", 0, "stop after publishing this many messages in all (0: by --duration)")
	c.Flags().BoolVar(&f.noBatching, "disable-batching", false, "send every message as its own entry")
	c.Flags().IntVar(&f.batchMax, "batch-max-messages", 1000, "messages per batch entry at most")
	c.Flags().DurationVar(&f.batchDelay, "batch-delay", time.Millisecond, "how long a batch waits for more messages")
	c.Flags().IntVar(&f.inFlight, "batch-in-flight", pulsarclient.DefaultBatchingMaxInFlight, "entries in flight per producer before a partial batch waits to gather more")
	c.Flags().IntVar(&f.keys, "keys", 0, "distinct message keys, spread over the producers (0: no keys)")
}

func (f *perfProducerFlags) validate(minSize int) error {
	switch {
	case f.producers < 1:
		return usageError{errors.New("--producers must be at least 1")}
	case f.size < minSize || f.size > 5<<20:
		return usageError{fmt.Errorf("--size must be between %d and %d bytes", minSize, 5<<20)}
	case f.rate < 0:
		return usageError{errors.New("--rate must not be negative")}
	case f.maxPending < 1:
		return usageError{errors.New("--max-pending must be at least 1")}
	case f.batchMax < 1 || f.batchDelay <= 0 || f.inFlight < 1:
		return usageError{errors.New("--batch-max-messages, --batch-delay and --batch-in-flight must be positive")}
	case f.keys < 0:
		return usageError{errors.New("--keys must not be negative")}
	}
	return nil
}

// options are the engine's producer options.
func (f *perfProducerFlags) options() perf.ProducerOptions {
	return perf.ProducerOptions{Producers: f.producers, Size: f.size, Rate: f.rate, MaxPending: f.maxPending, Sync: f.sync,
		Messages: f.messages, NoBatching: f.noBatching, BatchMax: f.batchMax, BatchDelay: f.batchDelay, InFlight: f.inFlight,
		Keys: f.keys}
}

// perfClients opens n clients (one connection each, as separate Pulsar client processes
// would have).
func perfClients(sf *serviceFlags, n int) ([]*pulsarclient.Client, func(), error) {
	var cls []*pulsarclient.Client
	closeAll := func() {
		for _, cl := range cls {
			cl.Close()
		}
	}
	for range n {
		cl, err := newPulsarClient(sf)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cls = append(cls, cl)
	}
	return cls, closeAll, nil
}

// How an e2e run spreads its producers and consumers over clients (connections): a client
// each (as many single-producer processes), all in one client (one connection, as an IoT
// gateway both publishing and consuming has), or one client for the producers and one for
// the consumers (as two processes).
const (
	clientsEach     = "each"
	clientsOne      = "one"
	clientsSeparate = "separate"
)

// perfE2EClients opens the clients of an e2e run by mode and returns them with the index of
// producer i's and consumer i's client.
func perfE2EClients(sf *serviceFlags, mode string, producers, consumers int) (cls []*pulsarclient.Client,
	prod, cons func(int) int, closeAll func(), err error) {
	var n int
	switch mode {
	case clientsEach:
		n = producers + consumers
		prod, cons = func(i int) int { return i }, func(i int) int { return producers + i }
	case clientsOne:
		n = 1
		prod, cons = func(int) int { return 0 }, func(int) int { return 0 }
	case clientsSeparate:
		n = 2
		prod, cons = func(int) int { return 0 }, func(int) int { return 1 }
	default:
		return nil, nil, nil, nil, usageError{fmt.Errorf("--clients must be %s, %s or %s, not %q", clientsEach, clientsOne, clientsSeparate, mode)}
	}
	cls, closeAll, err = perfClients(sf, n)
	return cls, prod, cons, closeAll, err
}

// perfRun runs one Pulsar benchmark on the clients: producer i on cls[prod(i)], consumer i
// on cls[cons(i)]. It prints the progress (and each window) on stderr and the result on
// stdout.
func perfRun(cmd *cobra.Command, f *perfClientFlags, cls []*pulsarclient.Client, prod, cons func(int) int, o perf.Options) error {
	sf := &f.serviceFlags
	o.Duration, o.Warmup, o.Window = f.duration, f.warmup, f.window
	o.NewProducer = func(ctx context.Context, i int, po pulsarclient.ProducerOptions) (perf.Producer, error) {
		return createProducer(ctx, cls[prod(i)], sf, po)
	}
	o.Subscribe = func(ctx context.Context, i int, co pulsarclient.ConsumerOptions) (perf.Consumer, error) {
		return subscribe(ctx, cls[cons(i)], sf, co, fmt.Sprintf("perf-%d-%d", os.Getpid(), i))
	}
	w := cmd.ErrOrStderr()
	o.Progress = func(p perf.Progress) { fmt.Fprintln(w, p) }
	o.OnWindow = func(win perf.WindowResult) { fmt.Fprintln(w, "window", win) }
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := perf.Run(ctx, o)
	if res == nil {
		return err
	}
	if perr := printPerfResult(cmd.OutOrStdout(), res, f.out.json()); perr != nil {
		return perr
	}
	return err
}

func printPerfResult(w io.Writer, r *perf.Result, asJSON bool) error {
	if asJSON {
		return printJSON(w, r)
	}
	return r.WriteText(w)
}

func newPerfProduceCmd() *cobra.Command {
	var f perfClientFlags
	var pf perfProducerFlags
	c := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Publish at a rate (or as fast as possible) and report throughput and publish latency",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(pf.messages); err != nil {
				return err
			}
			if err := pf.validate(1); err != nil {
				return err
			}
			cls, closeAll, err := perfClients(&f.serviceFlags, pf.producers)
			if err != nil {
				return err
			}
			defer closeAll()
			return perfRun(cmd, &f, cls, identity, identity, perf.Options{Tool: perf.Produce, Topic: args[0], Producer: pf.options()})
		},
	}
	f.add(c)
	pf.add(c)
	return clientTool(c)
}

// perfConsumerFlags configure the consuming side.
type perfConsumerFlags struct {
	sub, subType, position string
	consumers              int
	queue                  int
	ackGrouping            time.Duration
	noAck                  bool
}

func (f *perfConsumerFlags) add(c *cobra.Command, defaultPosition string) {
	c.Flags().StringVar(&f.sub, "subscription", "perf", "subscription name")
	c.Flags().StringVarP(&f.subType, "type", "t", "Exclusive", "subscription type (Shared or Key_Shared for several consumers)")
	c.Flags().StringVarP(&f.position, "position", "p", defaultPosition, "where a new subscription starts: Earliest or Latest")
	c.Flags().IntVar(&f.consumers, "consumers", 1, "number of consumers")
	c.Flags().IntVar(&f.queue, "receiver-queue", 1000, "receiver queue size (permits) per consumer")
	c.Flags().DurationVar(&f.ackGrouping, "ack-grouping", 100*time.Millisecond, "acknowledgement grouping time (negative: ack each at once)")
	c.Flags().BoolVar(&f.noAck, "no-ack", false, "do not acknowledge")
}

func (f *perfConsumerFlags) options(topic string) (pulsarclient.ConsumerOptions, error) {
	st, err := pulsarclient.ParseSubscriptionType(f.subType)
	if err != nil {
		return pulsarclient.ConsumerOptions{}, usageError{err}
	}
	if f.consumers < 1 || f.queue < 1 || f.sub == "" {
		return pulsarclient.ConsumerOptions{}, usageError{errors.New("--consumers and --receiver-queue must be positive, --subscription not empty")}
	}
	if f.consumers > 1 && (st == pulsarclient.Exclusive || st == pulsarclient.Failover) {
		return pulsarclient.ConsumerOptions{}, usageError{fmt.Errorf("%d consumers need a Shared or Key_Shared subscription", f.consumers)}
	}
	o := pulsarclient.ConsumerOptions{Topic: topic, Subscription: f.sub, Type: st, ReceiverQueueSize: f.queue,
		AckGroupingTime: f.ackGrouping}
	switch {
	case strings.EqualFold(f.position, "earliest"):
		o.InitialPosition = pulsarclient.Earliest
	case strings.EqualFold(f.position, "latest"):
		o.InitialPosition = pulsarclient.Latest
	default:
		return o, usageError{fmt.Errorf("--position must be Earliest or Latest, not %q", f.position)}
	}
	return o, nil
}

func newPerfConsumeCmd() *cobra.Command {
	var f perfClientFlags
	var cf perfConsumerFlags
	var messages int64
	c := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Receive and acknowledge (e.g. a backlog) and report throughput",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(messages); err != nil {
				return err
			}
			opts, err := cf.options(args[0])
			if err != nil {
				return err
			}
			cls, closeAll, err := perfClients(&f.serviceFlags, cf.consumers)
			if err != nil {
				return err
			}
			defer closeAll()
			return perfRun(cmd, &f, cls, identity, identity, perf.Options{Tool: perf.Consume, Topic: args[0],
				Consumer: perf.ConsumerOptions{Consumers: cf.consumers, Messages: messages, NoAck: cf.noAck, Options: opts}})
		},
	}
	f.add(c)
	cf.add(c, "Earliest")
	c.Flags().Int64VarP(&messages, "messages", "m", 0, "stop after receiving this many messages (0: by --duration)")
	return clientTool(c)
}

func identity(i int) int { return i }

// newPerfE2ECmd is `magnetar perf e2e`, and with iot set `magnetar perf iot`: the same run
// with the defaults of Pulsar 5.0's "IoT telemetry" benchmark shape.
func newPerfE2ECmd() *cobra.Command { return perfE2ECmd(false) }

func newPerfIoTCmd() *cobra.Command { return perfE2ECmd(true) }

func perfE2ECmd(iot bool) *cobra.Command {
	var f perfClientFlags
	var pf perfProducerFlags
	var cf perfConsumerFlags
	var clients string
	c := &cobra.Command{
		Use:   "e2e TOPIC",
		Short: "Publish and consume together; report publish and end-to-end latency from the scheduled send time",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(pf.messages); err != nil {
				return err
			}
			if err := pf.validate(8); err != nil {
				return err
			}
			opts, err := cf.options(args[0])
			if err != nil {
				return err
			}
			if iot && !cmd.Flags().Changed("keys") {
				pf.keys = pf.producers // a key per device
			}
			cls, prod, cons, closeAll, err := perfE2EClients(&f.serviceFlags, clients, pf.producers, cf.consumers)
			if err != nil {
				return err
			}
			defer closeAll()
			return perfRun(cmd, &f, cls, prod, cons, perf.Options{Tool: perf.E2E, Topic: args[0], Producer: pf.options(),
				Consumer: perf.ConsumerOptions{Consumers: cf.consumers, NoAck: cf.noAck, Options: opts}})
		},
	}
	f.add(c)
	pf.add(c)
	cf.add(c, "Latest")
	c.Flags().StringVar(&clients, "clients", clientsEach, "how producers and consumers share clients (connections): each (a client each), one (all on one client), separate (one client for the producers, one for the consumers)")
	if iot {
		c.Use = "iot TOPIC"
		c.Short = "The IoT telemetry shape: many producers of unbatched, keyed, small messages and Key_Shared consumers, by default all on one client"
		c.Long = `The shape of Pulsar 5.0's "IoT telemetry" benchmark, as an e2e run with its defaults:
500 producers sending unbatched 128-byte messages, each with a key of its own (--keys: as
many as producers), 20 consumers on a Key_Shared subscription, all on one client (one
connection, as an IoT gateway that both publishes and consumes has; --clients separate puts
the consumers on a client of their own), reported per 10 s window (--window). The end-to-end
latency is counted from the publish time stamped in each payload (the scheduled time with
--rate). Compare the received rate with the published rate: consumers that keep up receive
as much as is published in every window.`
		for name, v := range map[string]string{"producers": "500", "size": "128", "disable-batching": "true",
			"max-pending": "1000", "consumers": "20", "type": "Key_Shared", "clients": clientsOne, "window": "10s",
			"duration": "60s", "warmup": "5s"} {
			fl := c.Flags().Lookup(name)
			if err := fl.Value.Set(v); err != nil {
				panic(err) // a bad default above
			}
			fl.DefValue = v
		}
		c.Flags().Lookup("keys").Usage = "distinct message keys, spread over the producers (default: one per producer)"
	}
	return clientTool(c)
}
