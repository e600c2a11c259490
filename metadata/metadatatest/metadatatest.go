// Package metadatatest gives tests a real etcd: an embedded member (Embedded), Debian's etcd
// binary in a child process (External), and stores in private namespaces on either
// (NewStore). Everything started is stopped by t.Cleanup; stores close before their etcd
// because cleanups run last-registered first.
package metadatatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/metadata"
)

// RequireExternalEnv names the environment variable that turns a missing etcd binary from a
// skip into a failure (CI sets it to 1).
const RequireExternalEnv = "MAGNETAR_REQUIRE_EXTERNAL_ETCD"

// MissingBinaryMessage is the skip/fail message when the etcd binary is not installed.
const MissingBinaryMessage = "etcd binary not found: apt-get install -y etcd-server"

// startTimeout bounds how long External and Embedded wait for etcd to serve.
const startTimeout = 30 * time.Second

// Embedded starts a single-member embedded etcd (fast raft timings) on a free 127.0.0.1 port
// in t.TempDir(), stops it on cleanup and returns its client endpoints.
func Embedded(t testing.TB) []string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	e, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{
		Name:         "test",
		DataDir:      filepath.Join(dir, "etcd"),
		ListenClient: "127.0.0.1:0",
		ListenPeer:   "127.0.0.1:0",
		Fast:         true,
	})
	if err != nil {
		t.Fatalf("metadatatest: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("metadatatest: close embedded etcd: %v", err)
		}
	})
	return e.Endpoints()
}

// NewStore opens a store on endpoints in a fresh random namespace ("/test-<hex>"), so tests
// sharing one etcd never see each other's keys, and closes it on cleanup.
func NewStore(t testing.TB, endpoints []string) metadata.Store {
	t.Helper()
	return OpenStore(t, endpoints, RandomNamespace())
}

// OpenStore opens a store on endpoints in the given namespace and closes it on cleanup. Two
// stores opened with the same namespace share their keys (e.g. to play two processes).
func OpenStore(t testing.TB, endpoints []string, namespace string) *metadata.EtcdStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := metadata.Open(ctx, metadata.Config{Endpoints: endpoints, Namespace: namespace})
	if err != nil {
		t.Fatalf("metadatatest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("metadatatest: close store: %v", err)
		}
	})
	return s
}

// RandomNamespace returns a fresh namespace "/test-<16 hex digits>".
func RandomNamespace() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "/test-" + hex.EncodeToString(b[:])
}

// External starts the etcd binary from $PATH (Debian's etcd-server) on free 127.0.0.1 ports
// in a temp dir, waits until it answers a real request, kills it on cleanup and returns its
// client endpoints. Without the binary the test is skipped, or fails when
// MAGNETAR_REQUIRE_EXTERNAL_ETCD=1.
func External(t testing.TB) []string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv(RequireExternalEnv) == "1" {
			t.Fatal(MissingBinaryMessage)
		}
		t.Skip(MissingBinaryMessage)
	}
	// The free ports are found by binding port 0 and releasing it, so another process can
	// grab one before etcd binds it; retry a couple of times on that race only.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		eps, retry, err := startExternal(t, bin)
		if err == nil {
			return eps
		}
		lastErr = err
		if !retry {
			break
		}
	}
	t.Fatalf("metadatatest: start %s: %v", bin, lastErr)
	return nil
}

// startExternal runs one attempt of External. retry reports a port collision.
func startExternal(t testing.TB, bin string) (endpoints []string, retry bool, err error) {
	t.Helper()
	dir := t.TempDir()
	clientAddr, err := freeAddr()
	if err != nil {
		return nil, false, err
	}
	peerAddr, err := freeAddr()
	if err != nil {
		return nil, false, err
	}
	logPath := filepath.Join(dir, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, false, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin,
		"--name", "external",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+clientAddr,
		"--advertise-client-urls", "http://"+clientAddr,
		"--listen-peer-urls", "http://"+peerAddr,
		"--initial-advertise-peer-urls", "http://"+peerAddr,
		"--initial-cluster", "external=http://"+peerAddr,
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
	)
	cmd.Env = etcdFreeEnv()
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel() // stop waiting for a server that is gone
		case <-ctx.Done():
		}
	}()
	if err := waitReady(ctx, []string{clientAddr}); err != nil {
		stop()
		out, _ := os.ReadFile(logPath)
		collided := bytes.Contains(out, []byte("address already in use"))
		return nil, collided, fmt.Errorf("etcd not ready: %w\n--- etcd log tail ---\n%s", err, tail(out, 4000))
	}
	t.Cleanup(stop)
	return []string{clientAddr}, false, nil
}

// waitReady blocks until etcd at endpoints answers a read or ctx ends. The client waits for
// the connection itself (gRPC wait-for-ready), so one call suffices.
func waitReady(ctx context.Context, endpoints []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Get(ctx, "/metadatatest/ready", clientv3.WithCountOnly())
	return err
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// etcdFreeEnv is the environment without ETCD_* variables, which etcd would read as flags.
func etcdFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
