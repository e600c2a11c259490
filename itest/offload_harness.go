package itest

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// S3Server is a real S3 server for the tiered-storage tests: versitygw
// (github.com/versity/versitygw, Apache-2.0), a Go S3 gateway serving a directory, started
// on a reserved 127.0.0.1 port with one bucket. Stop and Start take it away and bring it
// back on the same port and directory (an object-store outage).
type S3Server struct {
	t                           testing.TB
	bin, Dir, Addr              string
	Access, Secret, Bucket, Log string
	cmd                         *exec.Cmd
	exited                      chan struct{}
}

// findVersitygw returns the server binary: $MAGNETAR_VERSITYGW, versitygw on $PATH, or
// $(go env GOPATH)/bin/versitygw (where `go install` puts it). Without one the test skips,
// unless MAGNETAR_REQUIRE_S3=1 (CI, which installs it), where it fails.
func findVersitygw(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MAGNETAR_VERSITYGW"); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, d := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(d, "bin", "versitygw")
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
	}
	const msg = "no S3 server: install it with `go install github.com/versity/versitygw/cmd/versitygw@v1.8.0` (or set MAGNETAR_VERSITYGW)"
	if os.Getenv("MAGNETAR_REQUIRE_S3") == "1" {
		t.Fatal(msg + "; MAGNETAR_REQUIRE_S3=1 makes this a failure")
	}
	t.Skip(msg)
	return ""
}

// StartS3 starts versitygw over a new directory (under $MAGNETAR_S3_DIR if set, else the
// test's temporary directory) with the bucket "offload" and stops it at the end of the test.
// It skips the test if versitygw is not installed (see findVersitygw).
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	dir := t.TempDir()
	if parent := os.Getenv("MAGNETAR_S3_DIR"); parent != "" {
		// Another file system for the objects (a benchmark separating the object store's
		// disk from the bookie's).
		var err error
		if dir, err = os.MkdirTemp(parent, "versitygw-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	s := &S3Server{t: t, bin: findVersitygw(t), Dir: dir, Addr: FreeAddr(t),
		Access: "magnetar", Secret: "magnetar-test-secret", Bucket: "offload",
		Log: filepath.Join(t.TempDir(), "versitygw.log")}
	s.Start()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(s.Log)
			if len(b) > 4<<10 {
				b = b[len(b)-4<<10:]
			}
			t.Logf("--- log of versitygw ---\n%s", b)
		}
	})
	if err := s.createBucket(); err != nil {
		t.Fatalf("create bucket %s: %v", s.Bucket, err)
	}
	return s
}

// Endpoint is the server's URL.
func (s *S3Server) Endpoint() string { return "http://" + s.Addr }

// StandaloneArgs are the flags of `magnetar standalone` (or broker) that offload to the
// server with the aws-s3 driver.
func (s *S3Server) StandaloneArgs() []string {
	return []string{"--managed-ledger-offload-driver", "aws-s3",
		"--s3-managed-ledger-offload-bucket", s.Bucket,
		"--s3-managed-ledger-offload-service-endpoint", s.Endpoint(),
		"--s3-managed-ledger-offload-credential-id", s.Access,
		"--s3-managed-ledger-offload-credential-secret", s.Secret}
}

// Start starts the server (again) and waits until it accepts connections.
func (s *S3Server) Start() {
	t := s.t
	t.Helper()
	f, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(s.bin, "--access", s.Access, "--secret", s.Secret, "--port", s.Addr, "--quiet", "posix", s.Dir)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { cmd.Wait(); f.Close(); close(exited) }(s.cmd, s.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.exited:
			t.Fatalf("versitygw exited at start (log %s)", s.Log)
		case <-time.After(20 * time.Millisecond): // the next connection attempt
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw not listening on %s after 30s", s.Addr)
		}
	}
}

// Stop kills the server (SIGKILL) and waits for it to exit; it is a no-op if stopped.
func (s *S3Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// createBucket sends S3's CreateBucket, signed with AWS Signature Version 4 (the one request
// the tests make outside the product's client; this module's tests must not need the SDK).
func (s *S3Server) createBucket() error {
	req, err := http.NewRequest(http.MethodPut, s.Endpoint()+"/"+s.Bucket, nil)
	if err != nil {
		return err
	}
	s.sign(req, time.Now().UTC())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

// sign adds the SigV4 headers of a request without a body, region us-east-1.
func (s *S3Server) sign(req *http.Request, now time.Time) {
	const region, service = "us-east-1", "s3"
	empty := sha256.Sum256(nil)
	payload := hex.EncodeToString(empty[:])
	amzDate, day := now.Format("20060102T150405Z"), now.Format("20060102")
	req.Header.Set("x-amz-date", amzDate)
	req.Header.Set("x-amz-content-sha256", payload)
	signed := "host;x-amz-content-sha256;x-amz-date"
	canonical := strings.Join([]string{req.Method, req.URL.EscapedPath(), req.URL.RawQuery,
		"host:" + req.URL.Host + "\nx-amz-content-sha256:" + payload + "\nx-amz-date:" + amzDate + "\n",
		signed, payload}, "\n")
	scope := day + "/" + region + "/" + service + "/aws4_request"
	ch := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
	mac := func(key []byte, v string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(v))
		return h.Sum(nil)
	}
	k := mac(mac(mac(mac([]byte("AWS4"+s.Secret), day), region), service), "aws4_request")
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		s.Access, scope, signed, hex.EncodeToString(mac(k, toSign))))
}

// Metric scrapes url (a Prometheus text endpoint such as http://host/metrics) and returns
// the sum of the samples of metric name (every label set; for a histogram, name_count or
// name_sum), and whether any sample was found.
func Metric(ctx context.Context, url, name string) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}

// DiskUsage returns the bytes the regular files under dir take on disk (their allocated
// blocks; files that vanish meanwhile are skipped).
func DiskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// BookieLedgerDir is where the bookie of `magnetar standalone --data-dir dataDir` keeps its
// ledger storage (entry logs and index; the journal is beside it).
func BookieLedgerDir(dataDir string) string {
	return filepath.Join(dataDir, "bookie", "current", "ledgers")
}

// WaitAdmin waits until the admin API at httpURL (http://host:port) serves and namespace
// public/default exists: a standalone listens on its HTTP port before its broker is up and
// mounts the admin API after.
func WaitAdmin(t testing.TB, httpURL string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(httpURL + "/admin/v2/namespaces/public")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "public/default") {
				return
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin API at %s not ready after %v: %v", httpURL, d, err)
		}
		time.Sleep(50 * time.Millisecond) // polled: the process says nothing when it is ready
	}
}

// CPUTime returns the CPU time (user and system) the running server has used so far (0 if
// stopped).
func (s *S3Server) CPUTime() time.Duration {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	return statCPU(b)
}
