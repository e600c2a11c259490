package offload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/magnetar-io/magnetar/itest"
)

// versitygw is a real S3 server (github.com/versity/versitygw, Apache-2.0) serving a
// directory on 127.0.0.1, started by the test with itest's harness (which skips the test
// without the server, or fails it with MAGNETAR_REQUIRE_S3=1).
type versitygw struct{ *itest.S3Server }

// s3TestBucket is the bucket the tests create (the harness's own stays unused).
const s3TestBucket = "offload-test"

func startVersitygw(t *testing.T) *versitygw { return &versitygw{itest.StartS3(t)} }

// client returns an S3 client of the server, for checks the blob API does not offer.
func (g *versitygw) client(t *testing.T) *s3.Client {
	t.Helper()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(g.Access, g.Secret, "")))
	if err != nil {
		t.Fatal(err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(g.Endpoint())
		o.UsePathStyle = true
	})
}

func (g *versitygw) config(t *testing.T) Config {
	return configOf(t,
		"managedLedgerOffloadDriver", "aws-s3",
		"s3ManagedLedgerOffloadBucket", s3TestBucket,
		"s3ManagedLedgerOffloadServiceEndpoint", g.Endpoint(),
		"s3ManagedLedgerOffloadCredentialId", g.Access,
		"s3ManagedLedgerOffloadCredentialSecret", g.Secret,
		"s3ManagedLedgerOffloadMaxBlockSizeInBytes", fmt.Sprint(s3MinBlockSize),
		"managedLedgerOffloadReadAheadBlocks", "0",
	)
}

// TestS3 runs the offloader against a real S3 server: a multi-block ledger (with an entry
// larger than a block) written as a multipart upload, read back with one ranged GET per
// block, an aborted upload that leaves nothing (no object, no open multipart upload), reads
// failing retryably while the server is down and succeeding once it is back, and Delete.
func TestS3(t *testing.T) {
	g := startVersitygw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc := g.client(t)
	if _, err := sc.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s3TestBucket)}); err != nil {
		t.Fatal(err)
	}
	o, err := Open(ctx, g.config(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()

	// About 13 MiB: small entries, one of 6 MiB (larger than a 5 MiB block), small again.
	payloads := randomPayloads(20, 150, 64<<10)
	payloads = append(payloads, bytes.Repeat([]byte("B"), 6<<20))
	payloads = append(payloads, randomPayloads(21, 40, 32<<10)...)
	attempt := uuid.New()
	res, err := o.Offload(ctx, 20, attempt, metadataOf(payloads), SliceEntries(payloads))
	if err != nil {
		t.Fatal(err)
	}
	if res.Blocks < 3 {
		t.Fatalf("%d blocks, want at least 3", res.Blocks)
	}
	head, err := sc.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s3TestBucket), Key: aws.String(res.DataKey)})
	if err != nil {
		t.Fatal(err)
	}
	// A multipart upload's ETag is "<md5 of the parts' md5s>-<part count>".
	if etag := strings.Trim(aws.ToString(head.ETag), `"`); !strings.HasSuffix(etag, fmt.Sprintf("-%d", res.Blocks)) {
		t.Fatalf("data object ETag %s: not a multipart upload of %d parts (one per block)", etag, res.Blocks)
	}
	if v := head.Metadata[metaFormatVersion]; v != FormatVersion || head.Metadata[metaRole] != metaRoleData {
		t.Fatalf("data object metadata %v", head.Metadata)
	}

	h, err := o.OpenLedger(ctx, 20, attempt)
	if err != nil {
		t.Fatal(err)
	}
	checkBlockSizes(t, h, s3MinBlockSize)
	last := h.LastEntryID()
	gets0 := testutil.ToFloat64(o.m.blockGets)
	got, err := h.Read(ctx, 0, last)
	if err != nil {
		t.Fatal(err)
	}
	for i := range payloads {
		if !bytes.Equal(got[i], payloads[i]) {
			t.Fatalf("entry %d differs", i)
		}
	}
	if n := testutil.ToFloat64(o.m.blockGets) - gets0; int(n) != res.Blocks {
		t.Fatalf("%v ranged GETs for %d blocks", n, res.Blocks)
	}

	// An offload whose source fails after the first part leaves no object and no open
	// multipart upload.
	failAt := int64(len(payloads) - 10)
	src := RangeEntries(func(_ context.Context, first, l int64) ([][]byte, error) {
		if l >= failAt {
			return nil, errBookies
		}
		return payloads[first : l+1], nil
	}, int64(len(payloads)-1), 5)
	failed := uuid.New()
	if _, err := o.Offload(ctx, 21, failed, metadataOf(payloads), src); !errors.Is(err, errBookies) {
		t.Fatalf("Offload with a failing source: %v", err)
	}
	ups, err := sc.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s3TestBucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Fatalf("open multipart uploads after an aborted offload: %d", len(ups.Uploads))
	}
	if _, err := sc.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s3TestBucket), Key: aws.String(DataKey(failed, 21))}); err == nil {
		t.Fatal("the aborted offload's data object exists")
	}

	// The server goes away: reads of uncached blocks fail, retryably; they succeed once it
	// is back.
	o2, err := Open(ctx, g.config(t), nil) // a fresh cache
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	h2, err := o2.OpenLedger(ctx, 20, attempt)
	if err != nil {
		t.Fatal(err)
	}
	g.Stop()
	if _, err := h2.Read(ctx, 0, 0); !errors.Is(err, ErrUnavailable) || !IsRetryable(err) {
		t.Fatalf("Read with the server down: %v", err)
	}
	g.Start()
	if got, err := h2.Read(ctx, last, last); err != nil || !bytes.Equal(got[0], payloads[last]) {
		t.Fatalf("Read after the server came back: %v", err)
	}

	// An upload left open by a crash mid-offload is aborted by Delete.
	crashed := uuid.New()
	if _, err := sc.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3TestBucket), Key: aws.String(DataKey(crashed, 22))}); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(ctx, 22, crashed); err != nil {
		t.Fatal(err)
	}
	if ups, err := sc.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s3TestBucket)}); err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("open multipart uploads after Delete: %v", err)
	}

	if err := o.Delete(ctx, 20, attempt); err != nil {
		t.Fatal(err)
	}
	list, err := sc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s3TestBucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Contents) != 0 {
		t.Fatalf("objects left after Delete: %d", len(list.Contents))
	}
}

// An unreachable endpoint does not fail Open (nothing is contacted), and the first offload
// fails with a retryable error naming the problem.
func TestS3Unreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cfg := configOf(t, "managedLedgerOffloadDriver", "aws-s3", "s3ManagedLedgerOffloadBucket", "b",
		"s3ManagedLedgerOffloadServiceEndpoint", "http://"+addr,
		"s3ManagedLedgerOffloadCredentialId", "x", "s3ManagedLedgerOffloadCredentialSecret", "y")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	payloads := randomPayloads(30, 5, 100)
	_, err = o.Offload(ctx, 30, uuid.New(), metadataOf(payloads), SliceEntries(payloads))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Offload to an unreachable endpoint: %v", err)
	}
}
