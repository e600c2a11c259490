package topic

import (
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/api"
)

// Errors. Callers test them with errors.Is; the broker maps them to protocol ServerError
// codes in one table (broker/server/errors.go).
var (
	// ErrTerminated: the topic is terminated (TopicTerminatedError).
	ErrTerminated = api.ErrTopicTerminated
	// ErrClosed: the service is not ready: the topic or subscription is closing or closed
	// (e.g. being unloaded) or the broker is starting or stopping; the client should look the
	// topic up again and retry (ServiceNotReady).
	ErrClosed = api.ErrServiceNotReady
	// ErrFenced: another broker took the topic's managed ledger over (ServiceNotReady). It
	// wraps ErrClosed.
	ErrFenced = fmt.Errorf("topic fenced by another owner: %w", ErrClosed)
	// ErrProducerBusy: a producer of that name is connected, or the topic has an exclusive
	// producer and a shared one asked (ProducerBusy).
	ErrProducerBusy = errors.New("topic: producer busy")
	// ErrProducerFenced: an exclusive producer asked while another producer holds the topic,
	// or its topic epoch is stale (ProducerFenced).
	ErrProducerFenced = errors.New("topic: producer fenced")
	// ErrConsumerBusy: an exclusive subscription already has a consumer, or the subscription
	// has another type and connected consumers (ConsumerBusy).
	ErrConsumerBusy = errors.New("topic: consumer busy")
	// ErrConsumerAssign: a Key_Shared consumer's sticky hash ranges overlap another's
	// (ConsumerAssignError).
	ErrConsumerAssign = errors.New("topic: consumer hash ranges conflict")
	// ErrSubscriptionNotFound: no such subscription (SubscriptionNotFound).
	ErrSubscriptionNotFound = api.ErrSubscriptionNotFound
	// ErrAlreadyExists: the subscription (tenant, namespace, topic) exists.
	ErrAlreadyExists = api.ErrAlreadyExists
	// ErrNotEmpty: the subscription or topic still has connected clients (the tenant has
	// namespaces, the namespace has topics).
	ErrNotEmpty = api.ErrNotEmpty
	// ErrInvalid: a malformed request or argument.
	ErrInvalid = api.ErrInvalidArgument
	// ErrNotAllowed: the operation is not allowed for this subscription type (NotAllowedError).
	ErrNotAllowed = api.ErrNotAllowed
	// ErrTxnDisabled answers transactional requests when transactions are off (Pulsar's
	// exact message, which clients and tools match).
	//lint:ignore ST1005 Pulsar's message
	ErrTxnDisabled = errors.New("Transactions are not enabled.")
	// ErrPersistence: the managed ledger failed an add or a read (PersistenceError).
	ErrPersistence = errors.New("topic: persistence error")
	// ErrIllegalTransition: a state machine was asked to take an edge it does not have (a bug).
	ErrIllegalTransition = errors.New("topic: illegal state transition")
)
