package offload

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
)

// blockWriter uploads a data object block by block. It is thread-unsafe. Exactly one of
// commit and abort ends it.
type blockWriter interface {
	// write appends block b (read only during the call) to the object.
	write(b []byte) error
	// commit makes the object visible with the blocks written.
	commit() error
	// abort discards what was written; no object becomes visible.
	abort()
}

// newBlockWriter returns the writer of data object key: an S3 multipart upload with one
// part per block when the Offloader was opened on S3, else a gocloud blob.Writer.
func (o *Offloader) newBlockWriter(ctx context.Context, key string) (blockWriter, error) {
	md := o.objectMetadata(metaRoleData)
	if o.s3 != nil {
		return &s3BlockWriter{ctx: ctx, mp: o.s3, key: key, md: md}, nil
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := o.bucket.NewWriter(wctx, key, &blob.WriterOptions{
		ContentType:    "application/octet-stream",
		Metadata:       md,
		BufferSize:     o.opts.PartSize,
		MaxConcurrency: 1,
	})
	if err != nil {
		cancel()
		return nil, storeError(ctx, "create", key, err)
	}
	return &blobBlockWriter{ctx: ctx, key: key, w: w, cancel: cancel}, nil
}

// blobBlockWriter streams the blocks through a gocloud writer (memblob, fileblob, GCS,
// Azure): the driver decides how to upload.
type blobBlockWriter struct {
	ctx    context.Context
	key    string
	w      *blob.Writer
	cancel context.CancelFunc // cancelling before Close discards the write
}

func (w *blobBlockWriter) write(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		return storeError(w.ctx, "write", w.key, err)
	}
	return nil
}

func (w *blobBlockWriter) commit() error {
	defer w.cancel()
	return storeError(w.ctx, "complete", w.key, w.w.Close())
}

func (w *blobBlockWriter) abort() {
	w.cancel()
	_ = w.w.Close()
}

// s3Multipart is the S3 client and bucket of an Offloader opened on S3. The data object is
// uploaded with the SDK's multipart API directly, as Pulsar does (part n is block n): the
// block buffer is the part, so no second buffer is held, and a failed upload is aborted
// with a context of its own, so no multipart upload is left open by a cancelled offload.
type s3Multipart struct {
	client *s3.Client
	bucket string
}

type s3BlockWriter struct {
	ctx      context.Context
	mp       *s3Multipart
	key      string
	md       map[string]string
	uploadID *string // set by the first write
	parts    []types.CompletedPart
}

func (w *s3BlockWriter) write(b []byte) error {
	if w.uploadID == nil {
		out, err := w.mp.client.CreateMultipartUpload(w.ctx, &s3.CreateMultipartUploadInput{
			Bucket: aws.String(w.mp.bucket), Key: aws.String(w.key),
			ContentType: aws.String("application/octet-stream"), Metadata: w.md,
		})
		if err != nil {
			return storeError(w.ctx, "create multipart upload", w.key, err)
		}
		w.uploadID = out.UploadId
	}
	n := int32(len(w.parts) + 1)
	out, err := w.mp.client.UploadPart(w.ctx, &s3.UploadPartInput{
		Bucket: aws.String(w.mp.bucket), Key: aws.String(w.key), UploadId: w.uploadID,
		PartNumber: aws.Int32(n), Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))),
	})
	if err != nil {
		return storeError(w.ctx, fmt.Sprintf("upload part %d", n), w.key, err)
	}
	w.parts = append(w.parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
	return nil
}

func (w *s3BlockWriter) commit() error {
	if w.uploadID == nil {
		// An empty ledger: no blocks, an empty object (a multipart upload needs a part).
		_, err := w.mp.client.PutObject(w.ctx, &s3.PutObjectInput{
			Bucket: aws.String(w.mp.bucket), Key: aws.String(w.key), Body: bytes.NewReader(nil),
			ContentType: aws.String("application/octet-stream"), Metadata: w.md,
		})
		return storeError(w.ctx, "put", w.key, err)
	}
	_, err := w.mp.client.CompleteMultipartUpload(w.ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(w.mp.bucket), Key: aws.String(w.key), UploadId: w.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: w.parts},
	})
	if err != nil {
		w.abort()
		return storeError(w.ctx, "complete multipart upload", w.key, err)
	}
	return nil
}

func (w *s3BlockWriter) abort() {
	if w.uploadID == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), cleanupTimeout)
	defer cancel()
	// A failure leaves the upload open; Delete aborts the uploads of a key it deletes.
	_, _ = w.mp.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(w.mp.bucket), Key: aws.String(w.key), UploadId: w.uploadID,
	})
}

// abortUploads aborts the multipart uploads left open on key (by a process that crashed
// mid-offload, or an abort that failed).
func (mp *s3Multipart) abortUploads(ctx context.Context, key string) error {
	var keyMarker, idMarker *string
	for {
		out, err := mp.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{
			Bucket: aws.String(mp.bucket), Prefix: aws.String(key), KeyMarker: keyMarker, UploadIdMarker: idMarker,
		})
		if err != nil {
			return storeError(ctx, "list multipart uploads", key, err)
		}
		for _, u := range out.Uploads {
			if aws.ToString(u.Key) != key {
				continue
			}
			_, err := mp.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
				Bucket: aws.String(mp.bucket), Key: u.Key, UploadId: u.UploadId,
			})
			if err != nil {
				var nf *types.NoSuchUpload
				if !errors.As(err, &nf) {
					return storeError(ctx, "abort multipart upload", key, err)
				}
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			return nil
		}
		keyMarker, idMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}
