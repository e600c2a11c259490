package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxFileSize bounds a configuration file (Pulsar's largest shipped file is ~100 KiB).
const MaxFileSize = 4 << 20

// Entry is one key=value of a file. Line is the 1-based line the entry starts on.
type Entry struct {
	Key, Value string
	Line       int
}

// SyntaxError is a malformed line.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// ErrTooLarge is returned by Parse for input over MaxFileSize.
var ErrTooLarge = errors.New("config: file too large")

// Parse reads Java properties text (see the package doc) and returns its entries in file
// order, duplicates included.
func Parse(r io.Reader) ([]Entry, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, ErrTooLarge
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 0, 64<<10), MaxFileSize+1)
	sc.Split(scanLines)
	var (
		out     []Entry
		logical strings.Builder
		start   int
		line    int
		cont    bool
	)
	for sc.Scan() {
		line++
		l := sc.Text()
		if cont {
			l = strings.TrimLeft(l, " \t\f")
		} else {
			t := strings.TrimLeft(l, " \t\f")
			if t == "" || t[0] == '#' || t[0] == '!' {
				continue
			}
			l, start = t, line
			logical.Reset()
		}
		if n := trailingBackslashes(l); n%2 == 1 {
			logical.WriteString(l[:len(l)-1])
			cont = true
			continue
		}
		logical.WriteString(l)
		cont = false
		e, err := parseLogical(logical.String(), start)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cont {
		e, err := parseLogical(logical.String(), start)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// scanLines splits on \n, \r\n and a lone \r, as java.util.Properties does.
func scanLines(data []byte, atEOF bool) (int, []byte, error) {
	for i, c := range data {
		switch c {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // need one more byte to tell \r from \r\n
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

func trailingBackslashes(s string) int {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n
}

// parseLogical splits one logical line (comments and continuations already handled) into
// its key and value and unescapes both.
func parseLogical(l string, line int) (Entry, error) {
	end := len(l)
	for i := 0; i < len(l); i++ {
		c := l[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			end = i
			break
		}
	}
	rawKey, rest := l[:end], l[end:]
	rest = strings.TrimLeft(rest, " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	key, err := unescape(rawKey, line)
	if err != nil {
		return Entry{}, err
	}
	val, err := unescape(rest, line)
	if err != nil {
		return Entry{}, err
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return Entry{}, &SyntaxError{Line: line, Msg: "empty key"}
	}
	return Entry{Key: key, Value: strings.TrimSpace(val), Line: line}, nil
}

func unescape(s string, line int) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			break // a lone trailing backslash (end of file in a continuation) is dropped
		}
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", &SyntaxError{Line: line, Msg: `truncated \u escape`}
			}
			v, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", &SyntaxError{Line: line, Msg: fmt.Sprintf(`malformed \u escape %q`, s[i-1:i+5])}
			}
			b.WriteRune(rune(v))
			i += 4
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}
