package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProcState is what the harness last did to a process.
type ProcState int

const (
	// Running: started and not known to have exited.
	Running ProcState = iota
	// Paused: sent SIGSTOP.
	Paused
	// Exited: killed by the harness or exited by itself.
	Exited
)

func (s ProcState) String() string {
	switch s {
	case Running:
		return "running"
	case Paused:
		return "paused"
	}
	return "exited"
}

// Proc is a process run inside a node's namespace (through `ip netns exec`, which execs the
// command: the pid is the command's). Its output is appended to a log file.
type Proc struct {
	Name string
	Node *Node
	Argv []string // command and arguments
	Env  []string // added to the harness's environment
	Log  string

	mu struct {
		sync.Mutex
		state  ProcState
		cmd    *exec.Cmd
		done   chan struct{}
		starts int
		exits  []string // how each incarnation ended, for the report
	}
}

// Start starts the process (again).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd != nil && p.mu.state != Exited {
		return nil
	}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== chaos: start %s at %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.Node.NS}, p.Argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	// Own process group: a Ctrl-C at the terminal reaches the harness only, which cleans up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.cmd, p.mu.done, p.mu.state = cmd, done, Running
	p.mu.starts++
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.mu.state = Exited
		p.mu.exits = append(p.mu.exits, exitString(err))
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func exitString(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// State reports the process state.
func (p *Proc) State() ProcState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.state
}

// Pid is the current incarnation's pid (0 if never started).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd == nil || p.mu.cmd.Process == nil {
		return 0
	}
	return p.mu.cmd.Process.Pid
}

// Done is closed when the current incarnation exits.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.done
}

func (p *Proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cmd != nil && p.mu.state != Exited {
		p.mu.cmd.Process.Signal(sig)
		switch sig {
		case syscall.SIGSTOP:
			p.mu.state = Paused
		case syscall.SIGCONT:
			p.mu.state = Running
		}
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	done := p.Done()
	if done == nil {
		return
	}
	p.signal(syscall.SIGKILL)
	<-done
}

// Dump sends SIGQUIT (and SIGCONT, should it be paused) and waits up to d for the exit, then
// kills: a Go program writes every goroutine's stack to its log as it exits.
func (p *Proc) Dump(d time.Duration) {
	done := p.Done()
	if done == nil {
		return
	}
	p.signal(syscall.SIGQUIT)
	p.signal(syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(d):
		p.Kill()
	}
}

// Pause sends SIGSTOP; Resume sends SIGCONT.
func (p *Proc) Pause()  { p.signal(syscall.SIGSTOP) }
func (p *Proc) Resume() { p.signal(syscall.SIGCONT) }

// Term sends SIGTERM (and SIGCONT, should it be paused) and waits up to d, then kills. It
// reports how long the process took to stop and whether it stopped by itself.
func (p *Proc) Term(d time.Duration) (time.Duration, bool) {
	done := p.Done()
	if done == nil {
		return 0, true
	}
	t0 := time.Now()
	p.signal(syscall.SIGTERM)
	p.signal(syscall.SIGCONT)
	select {
	case <-done:
		return time.Since(t0), true
	case <-time.After(d):
		p.Kill()
		return time.Since(t0), false
	}
}

// Exits lists how each incarnation ended.
func (p *Proc) Exits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.mu.exits...)
}

// Disk is a small tmpfs for one bookie's data, so that filling it is cheap and bounded.
type Disk struct {
	Dir    string
	filler string
	mu     sync.Mutex
	full   bool
}

// MountDisk mounts a tmpfs of size bytes on dir.
func MountDisk(dir string, size int64) (*Disk, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		return nil, fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return &Disk{Dir: dir, filler: filepath.Join(dir, "chaos-filler")}, nil
}

// Fill writes a file until the filesystem has no space left.
func (d *Disk) Fill() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(d.filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	d.full = true
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break // ENOSPC: full
		}
	}
	for {
		if _, err := f.Write(buf[:4096]); err != nil {
			return nil
		}
	}
}

// Free removes the filler file.
func (d *Disk) Free() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		os.Remove(d.filler)
		d.full = false
	}
}

// Unmount frees and unmounts the tmpfs (lazily, should a process still hold a file).
func (d *Disk) Unmount() error {
	d.Free()
	return unix.Unmount(d.Dir, unix.MNT_DETACH)
}
