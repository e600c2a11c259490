package offload

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The idle keep-alive connections of the S3 tests' HTTP clients.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

// errInjected is the failure a faultBucket injects: an error the blob library classifies
// as Unknown, as it does a network failure.
var errInjected = errors.New("injected object-store failure")

// rangeGet records one NewRangeReader call.
type rangeGet struct {
	key         string
	off, length int64
}

// faultBucket is a driver.Bucket over another bucket that records the ranged GETs and can
// fail reads, writes and deletes, as a test double of an object store with outages.
type faultBucket struct {
	inner *blob.Bucket

	mu struct {
		sync.Mutex
		gets        []rangeGet
		failGets    bool
		failWrites  bool   // writes fail on Write
		failKey     string // if set, only writes to this key fail
		failDeletes bool
	}
}

// newFaultBucket returns the *blob.Bucket over fb, and fb.
func newFaultBucket(inner *blob.Bucket) (*blob.Bucket, *faultBucket) {
	fb := &faultBucket{inner: inner}
	return blob.NewBucket(fb), fb
}

func (f *faultBucket) gets() []rangeGet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]rangeGet(nil), f.mu.gets...)
}

func (f *faultBucket) resetGets() {
	f.mu.Lock()
	f.mu.gets = nil
	f.mu.Unlock()
}

func (f *faultBucket) set(fn func(f *faultBucket)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

func (f *faultBucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (f *faultBucket) As(any) bool                            { return false }
func (f *faultBucket) ErrorAs(error, any) bool                { return false }
func (f *faultBucket) Close() error                           { return nil }

func (f *faultBucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	f.mu.Lock()
	fail := f.mu.failGets
	f.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	a, err := f.inner.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{ContentType: a.ContentType, Metadata: a.Metadata, ModTime: a.ModTime, Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (f *faultBucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	token := opts.PageToken
	if len(token) == 0 {
		token = blob.FirstPageToken
	}
	objs, next, err := f.inner.ListPage(ctx, token, max(opts.PageSize, 1000), &blob.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, o := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: o.Key, ModTime: o.ModTime, Size: o.Size, MD5: o.MD5, IsDir: o.IsDir})
	}
	return page, nil
}

func (f *faultBucket) NewRangeReader(ctx context.Context, key string, off, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	f.mu.Lock()
	f.mu.gets = append(f.mu.gets, rangeGet{key, off, length})
	fail := f.mu.failGets
	f.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	r, err := f.inner.NewRangeReader(ctx, key, off, length, nil)
	if err != nil {
		return nil, err
	}
	return &faultReader{r: r}, nil
}

type faultReader struct{ r *blob.Reader }

func (r *faultReader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *faultReader) Close() error               { return r.r.Close() }
func (r *faultReader) As(any) bool                { return false }
func (r *faultReader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.r.ContentType(), ModTime: r.r.ModTime(), Size: r.r.Size()}
}

func (f *faultBucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	w, err := f.inner.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType, Metadata: opts.Metadata, BufferSize: opts.BufferSize})
	if err != nil {
		return nil, err
	}
	return &faultWriter{f: f, key: key, w: w}, nil
}

type faultWriter struct {
	f   *faultBucket
	key string
	w   *blob.Writer
}

func (w *faultWriter) failing() bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	return w.f.mu.failWrites && (w.f.mu.failKey == "" || w.f.mu.failKey == w.key)
}

func (w *faultWriter) Write(p []byte) (int, error) {
	if w.failing() {
		return 0, errInjected
	}
	return w.w.Write(p)
}

func (w *faultWriter) Close() error {
	if w.failing() {
		// Leave the inner write unclosed: memblob and fileblob store nothing then.
		return errInjected
	}
	return w.w.Close()
}

func (f *faultBucket) Copy(ctx context.Context, dst, src string, opts *driver.CopyOptions) error {
	return f.inner.Copy(ctx, dst, src, nil)
}

func (f *faultBucket) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	f.mu.Lock()
	fail := f.mu.failDeletes
	f.mu.Unlock()
	if fail {
		return errInjected
	}
	return f.inner.Delete(ctx, key)
}

func (f *faultBucket) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	return "", errors.New("not supported")
}

// bucketKinds are the blob drivers every round-trip test runs on.
var bucketKinds = []struct {
	name string
	open func(t *testing.T) *blob.Bucket
}{
	{"memblob", func(t *testing.T) *blob.Bucket { return memblob.OpenBucket(nil) }},
	{"fileblob", func(t *testing.T) *blob.Bucket {
		b, err := fileblob.OpenBucket(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

// keys lists the bucket's keys.
func keys(t *testing.T, b *blob.Bucket) []string {
	t.Helper()
	var out []string
	it := b.List(nil)
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.Key)
	}
}
