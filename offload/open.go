package offload

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/prometheus/client_golang/prometheus"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // registers azblob:// on the default URL mux
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"
)

// Open validates cfg, opens the bucket of its driver and returns an Offloader that owns it
// (Close closes the bucket). reg receives the metrics (nil: not registered). Opening does
// not contact the store for S3, GCS and Azure: an unreachable endpoint shows in the first
// offload or read (ErrUnavailable). Configuration errors are *ConfigError naming the key.
//
// Credentials come from the usual sources of each SDK: for S3, the static
// s3ManagedLedgerOffloadCredentialId/Secret when set, else the AWS default chain
// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared files, web identity,
// the instance role), optionally assuming s3ManagedLedgerOffloadRole; for GCS,
// gcsManagedLedgerOffloadServiceAccountKeyFile when set, else Application Default
// Credentials; for Azure, AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY,
// AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_CONNECTION_STRING, else the default Azure
// credential.
func Open(ctx context.Context, cfg Config, reg prometheus.Registerer) (*Offloader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, &ConfigError{Key: "managedLedgerOffloadDriver", Reason: "no driver: offload is disabled"}
	}
	var b *blob.Bucket
	var mp *s3Multipart
	var err error
	if cfg.kind() == kindS3 {
		b, mp, err = openS3(ctx, cfg)
	} else {
		b, err = OpenBucket(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	opts := cfg.Options()
	opts.Registerer = reg
	o, err := newOffloader(b, true, opts)
	if err != nil {
		b.Close()
		return nil, err
	}
	o.s3 = mp
	return o, nil
}

// OpenBucket opens the bucket cfg (which must be valid and enabled) names, by driver.
func OpenBucket(ctx context.Context, cfg Config) (*blob.Bucket, error) {
	switch cfg.kind() {
	case kindS3:
		b, _, err := openS3(ctx, cfg)
		return b, err
	case kindGCS:
		return openGCS(ctx, cfg)
	case kindAzure:
		return openAzure(ctx, cfg)
	case kindFilesystem:
		dir, err := cfg.FileSystemDir()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, &ConfigError{Key: "fileSystemURI", Value: cfg.FileSystemURI, Reason: err.Error()}
		}
		b, err := fileblob.OpenBucket(dir, &fileblob.Options{})
		if err != nil {
			return nil, &ConfigError{Key: "fileSystemURI", Value: cfg.FileSystemURI, Reason: err.Error()}
		}
		return b, nil
	}
	return nil, cfg.Validate()
}

// s3DefaultRegion is the region used with a custom endpoint and no region configured:
// S3-compatible servers ignore it, but the SDK signs requests with one.
const s3DefaultRegion = "us-east-1"

// openS3 opens the S3 bucket, and returns the SDK client for the data objects' multipart
// uploads beside it.
func openS3(ctx context.Context, cfg Config) (*blob.Bucket, *s3Multipart, error) {
	bucket, _ := cfg.EffectiveBucket()
	region, regionKey := cfg.EffectiveRegion()
	endpoint, _ := cfg.EffectiveEndpoint()
	var loadOpts []func(*awsconfig.LoadOptions) error
	if region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(region))
	}
	if cfg.S3CredentialID != "" {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.S3CredentialID, cfg.S3CredentialSecret, "")))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: load AWS configuration: %w", ErrBadConfig, err)
	}
	if awsCfg.Region == "" {
		if endpoint == "" {
			return nil, nil, &ConfigError{Key: regionKey, Reason: "no region configured here or in the AWS environment, and no endpoint"}
		}
		awsCfg.Region = s3DefaultRegion
	}
	if cfg.S3Role != "" {
		awsCfg.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(awsCfg), cfg.S3Role,
			func(o *stscreds.AssumeRoleOptions) { o.RoleSessionName = cfg.S3RoleSessionName }))
	}
	opts := &s3blob.Options{}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if endpoint != "" {
			// An S3-compatible server: its own endpoint, path-style bucket addressing (no
			// per-bucket DNS names), and checksums only where the API requires them.
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	if endpoint != "" {
		opts.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	}
	b, err := s3blob.OpenBucket(ctx, client, bucket, opts)
	if err != nil {
		return nil, nil, err
	}
	return b, &s3Multipart{client: client, bucket: bucket}, nil
}

func openGCS(ctx context.Context, cfg Config) (*blob.Bucket, error) {
	bucket, _ := cfg.EffectiveBucket()
	endpoint, _ := cfg.EffectiveEndpoint()
	var creds *google.Credentials
	var err error
	if f := cfg.GCSServiceAccountKeyFile; f != "" {
		var js []byte
		js, err = os.ReadFile(f)
		if err == nil {
			creds, err = google.CredentialsFromJSONWithType(ctx, js, google.ServiceAccount, "https://www.googleapis.com/auth/devstorage.read_write")
		}
		if err != nil {
			return nil, &ConfigError{Key: "gcsManagedLedgerOffloadServiceAccountKeyFile", Value: f, Reason: err.Error()}
		}
	} else if creds, err = gcp.DefaultCredentials(ctx); err != nil {
		return nil, fmt.Errorf("%w: Google Application Default Credentials: %w", ErrBadConfig, err)
	}
	client, err := gcp.NewHTTPClient(gcp.DefaultTransport(), gcp.CredentialsTokenSource(creds))
	if err != nil {
		return nil, fmt.Errorf("%w: GCS client: %w", ErrBadConfig, err)
	}
	opts := &gcsblob.Options{}
	if endpoint != "" {
		opts.ClientOptions = []option.ClientOption{option.WithEndpoint(endpoint)}
	}
	return gcsblob.OpenBucket(ctx, client, bucket, opts)
}

func openAzure(ctx context.Context, cfg Config) (*blob.Bucket, error) {
	container, _ := cfg.EffectiveBucket()
	u := url.URL{Scheme: "azblob", Host: container}
	if endpoint, key := cfg.EffectiveEndpoint(); endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil {
			return nil, &ConfigError{Key: key, Value: endpoint, Reason: err.Error()}
		}
		q := url.Values{"protocol": {e.Scheme}, "domain": {e.Host}}
		if h := e.Hostname(); h == "localhost" || strings.HasPrefix(h, "127.") {
			q.Set("localemu", "true")
		}
		u.RawQuery = q.Encode()
	}
	// The default URL mux's opener reads the AZURE_STORAGE_* environment.
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: Azure container %s: %w", ErrBadConfig, container, err)
	}
	return b, nil
}
