package broker

import (
	"context"
	"errors"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
)

// mlog binds topic.Log to a managed ledger.
type mlog struct{ ml *mledger.ManagedLedger }

var _ topic.Log = mlog{}

func newMLog(ml *mledger.ManagedLedger) topic.Log { return mlog{ml} }

func (l mlog) AddAsync(data []byte, cb func(topic.Position, error)) { l.ml.AddAsync(data, cb) }
func (l mlog) LastConfirmed() topic.Position                        { return l.ml.LastConfirmed() }
func (l mlog) Read(ctx context.Context, from topic.Position, max int) ([]topic.Entry, error) {
	return l.ml.Read(ctx, from, max)
}
func (l mlog) Terminate(ctx context.Context) (topic.Position, error) { return l.ml.Terminate(ctx) }
func (l mlog) Stats(ctx context.Context) (mledger.Stats, error)      { return l.ml.Stats(ctx) }
func (l mlog) SetProperty(ctx context.Context, k, v string) error    { return l.ml.SetProperty(ctx, k, v) }
func (l mlog) Close(ctx context.Context) error                       { return l.ml.Close(ctx) }
func (l mlog) Delete(ctx context.Context) error                      { return l.ml.Delete(ctx) }

var errNoCursors = errors.New("broker: managed-ledger cursors are not available yet")

func (l mlog) Cursors(ctx context.Context) ([]string, error) { return nil, nil }
func (l mlog) OpenCursor(ctx context.Context, name string, start topic.Position) (topic.Cursor, error) {
	return nil, errNoCursors
}
func (l mlog) OpenNonDurableCursor(ctx context.Context, start topic.Position) (topic.Cursor, error) {
	return nil, errNoCursors
}
func (l mlog) DeleteCursor(ctx context.Context, name string) error { return errNoCursors }
