package server

import (
	"time"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// Transaction coordinator commands, each on its own goroutine (a coordinator may be
// loading). Errors a client acts on go in the response's error field.

// defaultTxnTimeout is the timeout of a transaction whose client sent none.
const defaultTxnTimeout = 3 * time.Hour

func (c *conn) txnCoordinator(tc uint64) (Coordinator, error) {
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	return c.b.TxnCoordinator(ctx, tc)
}

func errFields(err error) (*pb.ServerError, *string) {
	if err == nil {
		return nil, nil
	}
	msg := err.Error()
	return txnError(err).Enum(), &msg
}

func (c *conn) handleTcClientConnect(cmd *pb.CommandTcClientConnectRequest) {
	rid := cmd.GetRequestId()
	_, err := c.txnCoordinator(cmd.GetTcId())
	code, msg := errFields(err)
	c.Send(pulsar.Wrap(&pb.CommandTcClientConnectResponse{RequestId: &rid, Error: code, Message: msg}))
}

func (c *conn) handleNewTxn(cmd *pb.CommandNewTxn) {
	rid := cmd.GetRequestId()
	reply := func(id txn.ID, err error) {
		code, msg := errFields(err)
		most, least := id.Most, id.Least
		c.Send(pulsar.Wrap(&pb.CommandNewTxnResponse{RequestId: &rid, TxnidMostBits: &most, TxnidLeastBits: &least,
			Error: code, Message: msg}))
	}
	tc, err := c.txnCoordinator(cmd.GetTcId())
	if err != nil {
		reply(txn.ID{Most: cmd.GetTcId()}, err)
		return
	}
	// The field is named txn_ttl_seconds but carries milliseconds (upstream: txn_ttl_millis).
	ttl := time.Duration(cmd.GetTxnTtlSeconds()) * time.Millisecond
	if ttl <= 0 {
		ttl = defaultTxnTimeout
	}
	tc.NewTxn(ttl, reply)
}

func (c *conn) handleAddPartitionToTxn(cmd *pb.CommandAddPartitionToTxn) {
	rid := cmd.GetRequestId()
	id := txn.ID{Most: cmd.GetTxnidMostBits(), Least: cmd.GetTxnidLeastBits()}
	reply := func(_ txn.ID, err error) {
		code, msg := errFields(err)
		most, least := id.Most, id.Least
		c.Send(pulsar.Wrap(&pb.CommandAddPartitionToTxnResponse{RequestId: &rid, TxnidMostBits: &most,
			TxnidLeastBits: &least, Error: code, Message: msg}))
	}
	tc, err := c.txnCoordinator(id.Most)
	if err != nil {
		reply(id, err)
		return
	}
	tc.AddPartitions(id, cmd.GetPartitions(), reply)
}

func (c *conn) handleAddSubscriptionToTxn(cmd *pb.CommandAddSubscriptionToTxn) {
	rid := cmd.GetRequestId()
	id := txn.ID{Most: cmd.GetTxnidMostBits(), Least: cmd.GetTxnidLeastBits()}
	reply := func(_ txn.ID, err error) {
		code, msg := errFields(err)
		most, least := id.Most, id.Least
		c.Send(pulsar.Wrap(&pb.CommandAddSubscriptionToTxnResponse{RequestId: &rid, TxnidMostBits: &most,
			TxnidLeastBits: &least, Error: code, Message: msg}))
	}
	tc, err := c.txnCoordinator(id.Most)
	if err != nil {
		reply(id, err)
		return
	}
	subs := make([]txn.SubRef, 0, len(cmd.GetSubscription()))
	for _, s := range cmd.GetSubscription() {
		subs = append(subs, txn.SubRef{Topic: s.GetTopic(), Subscription: s.GetSubscription()})
	}
	tc.AddSubscriptions(id, subs, reply)
}

func (c *conn) handleEndTxn(cmd *pb.CommandEndTxn) {
	rid := cmd.GetRequestId()
	id := txn.ID{Most: cmd.GetTxnidMostBits(), Least: cmd.GetTxnidLeastBits()}
	reply := func(_ txn.ID, err error) {
		code, msg := errFields(err)
		most, least := id.Most, id.Least
		c.Send(pulsar.Wrap(&pb.CommandEndTxnResponse{RequestId: &rid, TxnidMostBits: &most, TxnidLeastBits: &least,
			Error: code, Message: msg}))
	}
	tc, err := c.txnCoordinator(id.Most)
	if err != nil {
		reply(id, err)
		return
	}
	tc.End(id, cmd.GetTxnAction() == pb.TxnAction_COMMIT, reply)
}
