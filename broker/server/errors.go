package server

import (
	"context"
	"errors"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/pendingack"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// ErrNoCoordinator: the transaction coordinator asked for is not served by this broker
// (TransactionCoordinatorNotFound: the client looks it up again). Backend.TxnCoordinator's
// errors wrap it.
var ErrNoCoordinator = errors.New("transaction coordinator not found")

// serverError maps an error to the protocol's ServerError. This is the one table (the
// transaction coordinator commands answer from txnError below); the Go client (pulsar-client-go) decides whether to retry from the code:
// TopicNotFound, TopicTerminatedError and ProducerFenced stop a producer, ServiceNotReady
// makes it look the topic up again, anything else is retried with backoff.
func serverError(err error) pb.ServerError {
	var no *api.NotOwnerError
	switch {
	case errors.Is(err, auth.ErrAuthentication):
		return pb.ServerError_AuthenticationError
	case errors.Is(err, auth.ErrNotAuthorized):
		return pb.ServerError_AuthorizationError
	case errors.Is(err, topic.ErrTerminated), errors.Is(err, mledger.ErrTerminated):
		return pb.ServerError_TopicTerminatedError
	case errors.Is(err, pendingack.ErrConflict):
		return pb.ServerError_TransactionConflict
	case errors.Is(err, txn.ErrNotFound):
		return pb.ServerError_TransactionNotFound
	case errors.Is(err, pendingack.ErrFailed):
		return pb.ServerError_PersistenceError
	case errors.Is(err, topic.ErrQuotaHold):
		return pb.ServerError_ProducerBlockedQuotaExceededError
	case errors.Is(err, topic.ErrQuotaException):
		return pb.ServerError_ProducerBlockedQuotaExceededException
	case errors.Is(err, topic.ErrProducerBusy):
		return pb.ServerError_ProducerBusy
	case errors.Is(err, topic.ErrProducerFenced):
		return pb.ServerError_ProducerFenced
	case errors.Is(err, topic.ErrConsumerBusy), errors.Is(err, topic.ErrNotEmpty):
		return pb.ServerError_ConsumerBusy
	case errors.Is(err, topic.ErrConsumerAssign):
		return pb.ServerError_ConsumerAssignError
	case errors.Is(err, topic.ErrSubscriptionNotFound), errors.Is(err, api.ErrSubscriptionNotFound):
		return pb.ServerError_SubscriptionNotFound
	case errors.Is(err, api.ErrTopicNotFound), errors.Is(err, api.ErrNamespaceNotFound), errors.Is(err, api.ErrTenantNotFound):
		return pb.ServerError_TopicNotFound
	case errors.Is(err, api.ErrIncompatibleSchema), errors.Is(err, api.ErrInvalidSchema):
		return pb.ServerError_IncompatibleSchema
	case errors.Is(err, api.ErrInvalidName):
		return pb.ServerError_InvalidTopicName
	case errors.Is(err, topic.ErrNotAllowed), errors.Is(err, api.ErrNotAllowed), errors.Is(err, topic.ErrInvalid):
		return pb.ServerError_NotAllowedError
	case errors.As(err, &no), errors.Is(err, api.ErrServiceNotReady), errors.Is(err, topic.ErrClosed),
		errors.Is(err, topic.ErrFenced), errors.Is(err, mledger.ErrFenced), errors.Is(err, mledger.ErrClosed),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return pb.ServerError_ServiceNotReady
	case errors.Is(err, topic.ErrPersistence), errors.Is(err, mledger.ErrLedgerCreate):
		return pb.ServerError_PersistenceError
	case errors.Is(err, metadata.ErrBadVersion), errors.Is(err, metadata.ErrSessionExpired),
		errors.Is(err, metadata.ErrClosed):
		return pb.ServerError_MetadataError
	}
	return pb.ServerError_UnknownError
}

// txnError maps a transaction coordinator's error to the protocol's code (the
// coordinator commands' table; anything unknown is ServiceNotReady, which the client
// retries).
func txnError(err error) pb.ServerError {
	switch {
	case errors.Is(err, topic.ErrTxnDisabled):
		return pb.ServerError_NotAllowedError
	case errors.Is(err, txn.ErrNotFound):
		return pb.ServerError_TransactionNotFound
	case errors.Is(err, txn.ErrInvalidStatus):
		return pb.ServerError_InvalidTxnStatus
	case errors.Is(err, ErrNoCoordinator):
		return pb.ServerError_TransactionCoordinatorNotFound
	case errors.Is(err, txn.ErrTooMany):
		return pb.ServerError_NotAllowedError
	}
	return pb.ServerError_ServiceNotReady
}
