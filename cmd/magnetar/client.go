package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

func init() {
	register(newProduceCmd)
	register(newConsumeCmd)
}

func newPulsarClient(sf *serviceFlags) (*pulsarclient.Client, error) {
	o := pulsarclient.Options{URL: sf.url, Logger: slog.Default(), ClientVersion: "magnetar-cli"}
	if err := sf.sec.pulsarOptions(&o); err != nil {
		return nil, err
	}
	cl, err := pulsarclient.New(o)
	if err != nil {
		return nil, usageError{fmt.Errorf("--url: %w", err)}
	}
	return cl, nil
}

// parseProperties parses k=v pairs.
func parseProperties(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("property %q: want key=value", kv)}
		}
		m[k] = v
	}
	return m, nil
}

func newProduceCmd() *cobra.Command {
	var (
		sf    serviceFlags
		key   string
		msgs  []string
		props []string
		n     int
		out   outputFlag
	)
	c := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Publish messages to a topic and wait until they are durable",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			if len(msgs) == 0 {
				return usageError{errors.New("give at least one message with -m")}
			}
			if n < 1 {
				return usageError{fmt.Errorf("-n must be at least 1, got %d", n)}
			}
			properties, err := parseProperties(props)
			if err != nil {
				return err
			}
			cl, err := newPulsarClient(&sf)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return produce(ctx, cl, &sf, args[0], msgs, key, properties, n, out.json(), cmd.OutOrStdout())
		},
	}
	addServiceFlags(c, &sf)
	c.Flags().StringArrayVarP(&msgs, "messages", "m", nil, "message text (repeat -m for several)")
	c.Flags().IntVarP(&n, "num-produce", "n", 1, "how many times to send the messages")
	c.Flags().StringVarP(&key, "key", "k", "", "partition key of every message")
	c.Flags().StringArrayVarP(&props, "property", "p", nil, "message property key=value (repeatable)")
	out.add(c)
	return clientTool(c)
}

// produce sends each message n times (asynchronously, then waits for every receipt).
func produce(ctx context.Context, cl *pulsarclient.Client, sf *serviceFlags, topic string, msgs []string, key string,
	props map[string]string, n int, asJSON bool, w io.Writer) error {
	p, err := createProducer(ctx, cl, sf, pulsarclient.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	total := n * len(msgs)
	ids := make([]pulsarclient.MessageID, total)
	errs := make(chan error, total)
	for i := range total {
		msg := &pulsarclient.ProducerMessage{Payload: []byte(msgs[i%len(msgs)]), Key: key, Properties: props}
		if err := p.SendAsync(ctx, msg, func(id pulsarclient.MessageID, err error) {
			ids[i] = id
			errs <- err
		}); err != nil {
			return err
		}
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	for range total {
		if err := <-errs; err != nil {
			return err
		}
	}
	if asJSON {
		return printJSON(w, map[string]any{"topic": p.Topic(), "produced": total, "messageIds": ids})
	}
	fmt.Fprintf(w, "%d messages successfully produced to %s\n", total, p.Topic())
	return nil
}

func newConsumeCmd() *cobra.Command {
	var (
		sf                     serviceFlags
		sub, subType, position string
		n                      int
		timeout                time.Duration
		out                    outputFlag
	)
	c := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Receive and acknowledge messages of a subscription",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			if sub == "" {
				return usageError{errors.New("-s/--subscription is required")}
			}
			if n < 0 || timeout < 0 {
				return usageError{errors.New("-n and --timeout must not be negative")}
			}
			st, err := pulsarclient.ParseSubscriptionType(subType)
			if err != nil {
				return usageError{err}
			}
			var pos pulsarclient.InitialPosition
			switch strings.ToLower(position) {
			case "latest":
				pos = pulsarclient.Latest
			case "earliest":
				pos = pulsarclient.Earliest
			default:
				return usageError{fmt.Errorf("-p/--position must be Earliest or Latest, not %q", position)}
			}
			cl, err := newPulsarClient(&sf)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return consume(ctx, cl, &sf, pulsarclient.ConsumerOptions{Topic: args[0], Subscription: sub, Type: st,
				InitialPosition: pos}, n, timeout, out.json(), cmd.OutOrStdout())
		},
	}
	addServiceFlags(c, &sf)
	c.Flags().StringVarP(&sub, "subscription", "s", "", "subscription name")
	c.Flags().StringVarP(&subType, "type", "t", "Exclusive", "subscription type: Exclusive, Shared, Failover or Key_Shared")
	c.Flags().StringVarP(&position, "position", "p", "Latest", "where a new subscription starts: Earliest or Latest")
	c.Flags().IntVarP(&n, "num-messages", "n", 1, "messages to receive (0: until interrupted)")
	c.Flags().DurationVar(&timeout, "timeout", 0, "fail if no message arrives for this long (0: wait forever)")
	out.add(c)
	return clientTool(c)
}

// consumedMessage is the JSON form of a received message.
type consumedMessage struct {
	ID              pulsarclient.MessageID `json:"messageId"`
	Payload         string                 `json:"payload"`
	Key             string                 `json:"key,omitempty"`
	Properties      map[string]string      `json:"properties,omitempty"`
	Producer        string                 `json:"producer"`
	PublishTime     time.Time              `json:"publishTime"`
	RedeliveryCount uint32                 `json:"redeliveryCount,omitempty"`
}

// consume receives n messages (0: until ctx ends), printing and acknowledging each.
func consume(ctx context.Context, cl *pulsarclient.Client, sf *serviceFlags, opts pulsarclient.ConsumerOptions, n int,
	timeout time.Duration, asJSON bool, w io.Writer) error {
	cons, err := subscribe(ctx, cl, sf, opts, "")
	if err != nil {
		return err
	}
	defer cons.Close(context.Background())
	enc := json.NewEncoder(w)
	for got := 0; n == 0 || got < n; got++ {
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			rctx, cancel = context.WithTimeout(ctx, timeout)
		}
		m, err := cons.Receive(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil && n == 0 {
				return nil // interrupted while consuming forever
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("no message within %v after %d received", timeout, got)
			}
			return err
		}
		if asJSON {
			if err := enc.Encode(consumedMessage{ID: m.ID, Payload: string(m.Payload), Key: m.Key, Properties: m.Properties,
				Producer: m.ProducerName, PublishTime: m.PublishTime, RedeliveryCount: m.RedeliveryCount}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(w, "----- got message -----\nid:[%s], key:[%s], properties:%v, content:%s\n", m.ID, m.Key, m.Properties, m.Payload)
		}
		if err := cons.Ack(m); err != nil {
			return err
		}
	}
	return cons.Close(ctx)
}
