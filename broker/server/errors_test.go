package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/pendingack"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// TestServerErrorTable: every error category the backend and the topics return maps to
// the code the Pulsar clients act on, also when wrapped; an unknown error is UnknownError.
func TestServerErrorTable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want pb.ServerError
	}{
		{auth.ErrAuthentication, pb.ServerError_AuthenticationError},
		{auth.ErrNotAuthorized, pb.ServerError_AuthorizationError},
		{topic.ErrTerminated, pb.ServerError_TopicTerminatedError},
		{mledger.ErrTerminated, pb.ServerError_TopicTerminatedError},
		{pendingack.ErrConflict, pb.ServerError_TransactionConflict},
		{txn.ErrNotFound, pb.ServerError_TransactionNotFound},
		{pendingack.ErrFailed, pb.ServerError_PersistenceError},
		{topic.ErrQuotaHold, pb.ServerError_ProducerBlockedQuotaExceededError},
		{topic.ErrQuotaException, pb.ServerError_ProducerBlockedQuotaExceededException},
		{topic.ErrProducerBusy, pb.ServerError_ProducerBusy},
		{topic.ErrProducerFenced, pb.ServerError_ProducerFenced},
		{topic.ErrConsumerBusy, pb.ServerError_ConsumerBusy},
		{topic.ErrNotEmpty, pb.ServerError_ConsumerBusy},
		{topic.ErrConsumerAssign, pb.ServerError_ConsumerAssignError},
		{api.ErrSubscriptionNotFound, pb.ServerError_SubscriptionNotFound},
		{api.ErrTopicNotFound, pb.ServerError_TopicNotFound},
		{api.ErrNamespaceNotFound, pb.ServerError_TopicNotFound},
		{api.ErrTenantNotFound, pb.ServerError_TopicNotFound},
		{api.ErrIncompatibleSchema, pb.ServerError_IncompatibleSchema},
		{api.ErrInvalidSchema, pb.ServerError_IncompatibleSchema},
		{api.ErrInvalidName, pb.ServerError_InvalidTopicName},
		{api.ErrNotAllowed, pb.ServerError_NotAllowedError},
		{api.ErrInvalidArgument, pb.ServerError_NotAllowedError},
		{&api.NotOwnerError{Topic: "t", Owner: api.BrokerInfo{ID: "b2"}}, pb.ServerError_ServiceNotReady},
		{api.ErrServiceNotReady, pb.ServerError_ServiceNotReady},
		{topic.ErrFenced, pb.ServerError_ServiceNotReady},
		{mledger.ErrFenced, pb.ServerError_ServiceNotReady},
		{mledger.ErrClosed, pb.ServerError_ServiceNotReady},
		{context.DeadlineExceeded, pb.ServerError_ServiceNotReady},
		{context.Canceled, pb.ServerError_ServiceNotReady},
		{topic.ErrPersistence, pb.ServerError_PersistenceError},
		{mledger.ErrLedgerCreate, pb.ServerError_PersistenceError},
		{metadata.ErrBadVersion, pb.ServerError_MetadataError},
		{metadata.ErrSessionExpired, pb.ServerError_MetadataError},
		{metadata.ErrClosed, pb.ServerError_MetadataError},
		{errors.New("something else"), pb.ServerError_UnknownError},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("context: %w", tc.err)} {
			if got := serverError(err); got != tc.want {
				t.Errorf("serverError(%v) = %v, want %v", err, got, tc.want)
			}
		}
	}
}

// TestTxnErrorTable: the coordinator commands' codes; anything unknown is retried
// (ServiceNotReady).
func TestTxnErrorTable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want pb.ServerError
	}{
		{topic.ErrTxnDisabled, pb.ServerError_NotAllowedError},
		{txn.ErrNotFound, pb.ServerError_TransactionNotFound},
		{txn.ErrInvalidStatus, pb.ServerError_InvalidTxnStatus},
		{ErrNoCoordinator, pb.ServerError_TransactionCoordinatorNotFound},
		{txn.ErrTooMany, pb.ServerError_NotAllowedError},
		{errors.New("store unreachable"), pb.ServerError_ServiceNotReady},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("context: %w", tc.err)} {
			if got := txnError(err); got != tc.want {
				t.Errorf("txnError(%v) = %v, want %v", err, got, tc.want)
			}
		}
	}
}
