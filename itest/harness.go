// Package itest holds Magnetar's tests with real processes: the magnetar binary is built once
// per test run and started as etcd, bookies (and later brokers) on 127.0.0.1, then killed with
// SIGKILL and restarted. The harness here is shared by those tests.
package itest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary returns the path of a magnetar binary built from this checkout (once per process),
// or the one MAGNETAR_BINARY names (a benchmark's binary built at a chosen commit).
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if b := os.Getenv("MAGNETAR_BINARY"); b != "" {
			binPath = b
			return
		}
		dir, err := os.MkdirTemp("", "magnetar-itest-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "magnetar")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(file))
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/magnetar")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// FreeAddr returns a 127.0.0.1 address whose port stays reserved for t until it ends, for a
// process (or an in-process server) to listen on, again after a restart.
//
// Probing a free port and releasing it is not enough: between the probe and the child's
// bind, the kernel may hand the port to any outgoing connection on the machine as its source
// port (the probe's port comes from the same ephemeral range), and the child then fails with
// "address already in use". So the port is held by a socket bound to it with SO_REUSEADDR
// and never listening. On Linux that bucket keeps the port out of every automatic choice (a
// connection's source port, a bind to port 0) and from any bind without SO_REUSEADDR, while a
// listener with SO_REUSEADDR — every Go listener sets it — may still bind and listen on it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, closeFn, err := reservePort()
	if err != nil {
		t.Fatalf("reserve a port: %v", err)
	}
	t.Cleanup(closeFn)
	return addr
}

// reservePort binds a socket to a port of 127.0.0.1 the kernel picks, without listening,
// and returns the address and the function that releases it.
func reservePort() (string, func(), error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	release := func() { syscall.Close(fd) }
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		release()
		return "", nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		release()
		return "", nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		release()
		return "", nil, err
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		release()
		return "", nil, fmt.Errorf("reserved socket has address %T", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port)), release, nil
}

// Proc is a running magnetar process whose output goes to a log file.
type Proc struct {
	t    testing.TB
	Name string
	Args []string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs the magnetar binary with args. The process is killed at test cleanup; its log is
// printed if the test failed.
func Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, Name: name, Args: args, Log: filepath.Join(t.TempDir(), name+".log")}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.Log)
			if len(b) > 16<<10 {
				b = b[len(b)-16<<10:]
			}
			t.Logf("--- log of %s (%v) ---\n%s", p.Name, p.Args, b)
		}
	})
	return p
}

func (p *Proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(Binary(p.t), p.Args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.Name, err)
	}
	p.done = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
}

// Restart starts the process again with the same arguments (after Kill or Stop).
func (p *Proc) Restart() {
	p.t.Helper()
	<-p.done
	p.start()
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Proc) Kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGTERM and waits up to d for a clean exit; it returns the exit error.
func (p *Proc) Stop(d time.Duration) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.Kill()
		return fmt.Errorf("%s did not stop within %v", p.Name, d)
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// LogContains reports whether the process log contains s.
func (p *Proc) LogContains(s string) bool {
	b, _ := os.ReadFile(p.Log)
	return bytes.Contains(b, []byte(s))
}

// StartEtcd runs `magnetar etcd` on free ports and returns the process and its metadata URL.
func StartEtcd(t testing.TB) (*Proc, string) {
	t.Helper()
	client, peer := FreeAddr(t), FreeAddr(t)
	p := Start(t, "etcd", "etcd", "--data-dir", filepath.Join(t.TempDir(), "etcd"), "--listen", client,
		"--peer-listen", peer)
	WaitTCP(t, client, 30*time.Second)
	return p, "etcd://" + client
}

// WaitTCP waits until addr accepts TCP connections.
func WaitTCP(t testing.TB, addr string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var dialer net.Dialer
	for {
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s not accepting connections after %v: %v", addr, d, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond): // retry interval of a connection attempt
		}
	}
}

// CPUTime returns the CPU time (user and system) the running process has used so far, from
// /proc (0 if it cannot be read): benchmarks report CPU per operation, which a busy machine
// changes less than throughput.
func (p *Proc) CPUTime() time.Duration {
	if p.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	return statCPU(b)
}

// SelfCPUTime returns the CPU time (user and system) of this process so far.
func SelfCPUTime() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	return statCPU(b)
}

// statCPU parses utime and stime (fields 14 and 15, in clock ticks of 10 ms) of a
// /proc/<pid>/stat line; the command name before them may contain spaces, so fields are
// counted after its closing parenthesis.
func statCPU(b []byte) time.Duration {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}
