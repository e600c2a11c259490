package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// Scalable topics (topic://tenant/ns/name) in produce, consume and perf: the client learns
// the layout and assignments from --admin-url and produces and consumes on the segments.

// clientProducer is what the tools need of a producer: a topic's, or a scalable topic's
// (pipelined: its SendAsync keeps a key's order across splits, see ScalableProducer).
type clientProducer interface {
	Send(ctx context.Context, msg *pulsarclient.ProducerMessage) (pulsarclient.MessageID, error)
	SendAsync(ctx context.Context, msg *pulsarclient.ProducerMessage, cb func(pulsarclient.MessageID, error)) error
	Flush(ctx context.Context) error
	Topic() string
	Close(ctx context.Context) error
}

// clientConsumer is what the tools need of a consumer.
type clientConsumer interface {
	Receive(ctx context.Context) (*pulsarclient.Message, error)
	Ack(m *pulsarclient.Message) error
	Close(ctx context.Context) error
}

type scalableProducer struct {
	p     *pulsarclient.ScalableProducer
	topic string
}

func (s scalableProducer) Send(ctx context.Context, msg *pulsarclient.ProducerMessage) (pulsarclient.MessageID, error) {
	_, id, err := s.p.Send(ctx, msg)
	return id, err
}

func (s scalableProducer) SendAsync(ctx context.Context, msg *pulsarclient.ProducerMessage, cb func(pulsarclient.MessageID, error)) error {
	return s.p.SendAsync(ctx, msg, func(_ string, id pulsarclient.MessageID, err error) { cb(id, err) })
}

func (s scalableProducer) Flush(ctx context.Context) error { return s.p.Flush(ctx) }
func (s scalableProducer) Topic() string                   { return s.topic }
func (s scalableProducer) Close(ctx context.Context) error { return s.p.Close(ctx) }

// scalable are the scalable-topic options: --admin-url, reached with the tools' credentials
// and TLS settings.
func (sf *serviceFlags) scalable() (pulsarclient.ScalableOptions, error) {
	hc, err := sf.sec.httpClient()
	if err != nil {
		return pulsarclient.ScalableOptions{}, err
	}
	hc.Timeout = time.Minute // as pulsarclient's own client
	return pulsarclient.ScalableOptions{AdminURL: sf.adminURL, HTTP: hc}, nil
}

// createProducer creates a producer of topic, scalable or not.
func createProducer(ctx context.Context, cl *pulsarclient.Client, sf *serviceFlags, o pulsarclient.ProducerOptions) (clientProducer, error) {
	if !pulsarclient.IsScalableTopic(o.Topic) {
		return cl.CreateProducer(ctx, o)
	}
	so, err := sf.scalable()
	if err != nil {
		return nil, err
	}
	p, err := cl.CreateScalableProducer(ctx, pulsarclient.ScalableProducerOptions{Topic: o.Topic, Producer: o, ScalableOptions: so,
		MaxPendingMessages: o.MaxPendingMessages})
	if err != nil {
		return nil, err
	}
	return scalableProducer{p: p, topic: o.Topic}, nil
}

// subscribe subscribes to topic, scalable or not: on a scalable topic an Exclusive or
// Failover subscription is a stream consumer (ordered, named name or after the process),
// Shared or Key_Shared a queue consumer.
func subscribe(ctx context.Context, cl *pulsarclient.Client, sf *serviceFlags, o pulsarclient.ConsumerOptions, name string) (clientConsumer, error) {
	if !pulsarclient.IsScalableTopic(o.Topic) {
		return cl.Subscribe(ctx, o)
	}
	sco, err := sf.scalable()
	if err != nil {
		return nil, err
	}
	so := pulsarclient.ScalableConsumerOptions{ScalableOptions: sco, Topic: o.Topic, Subscription: o.Subscription,
		Name: name, ReceiverQueueSize: o.ReceiverQueueSize}
	if o.Type == pulsarclient.Exclusive || o.Type == pulsarclient.Failover {
		if so.Name == "" {
			so.Name = "magnetar-cli-" + strconv.Itoa(os.Getpid())
		}
		return cl.SubscribeStream(ctx, so)
	}
	c, err := cl.SubscribeQueue(ctx, so)
	if err != nil {
		return nil, fmt.Errorf("queue consumer of %s: %w", o.Topic, err)
	}
	return c, nil
}
