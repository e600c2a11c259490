package config

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// Masked replaces a secret's value in printed configurations.
const Masked = "******"

// Key maps a Pulsar configuration key to the flag that holds the setting. Keys are
// case-sensitive, as in Pulsar.
type Key struct {
	// Name is the Pulsar key (e.g. "managedLedgerDefaultEnsembleSize").
	Name string
	// Flag is the flag the key sets; "" for a key that only feeds other keys' Map (e.g.
	// bindAddress), which is then known but sets nothing by itself.
	Flag string
	// Secret masks the flag's value in Print (key material, passwords, credentials).
	Secret bool
	// Map converts the file's value to the flag's. get reads another key of the file (the
	// last value given, ok false if absent). Nil: the value as is, and an empty value leaves
	// the flag at its default. A Map sees empty values too and may return ("", nil) for them;
	// returning skip leaves the flag alone.
	Map func(v string, get func(key string) (string, bool)) (flagValue string, err error)
}

// Skip, returned by a Key's Map, leaves the flag at its default.
var Skip = skipError{}

type skipError struct{}

func (skipError) Error() string { return "config: skip" }

// KeyError is a value a key's flag refused. Its message names the file, line and key but
// never the value of a secret key.
type KeyError struct {
	File string
	Line int
	Key  string
	Err  error
}

func (e *KeyError) Error() string {
	where := e.File
	if where != "" {
		where += ":"
	}
	return fmt.Sprintf("%s%d: key %s: %v", where, e.Line, e.Key, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// Load reads and parses the file at path.
func Load(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return es, nil
}

// Result says what Apply did.
type Result struct {
	// Ignored are the keys that are neither a Key nor a flag, sorted and without duplicates.
	Ignored []string
	// From maps each flag the file set to the entry that set it.
	From map[string]Entry
}

// Apply sets, from entries (read from file, which only names it in errors), every flag of fs
// that the command line did not set.
func Apply(fs *pflag.FlagSet, file string, entries []Entry, keys []Key) (*Result, error) {
	res := &Result{From: map[string]Entry{}}
	last := map[string]Entry{}
	for _, e := range entries {
		last[e.Key] = e
	}
	get := func(k string) (string, bool) {
		e, ok := last[k]
		return e.Value, ok
	}
	byName := map[string]Key{}
	for _, k := range keys {
		byName[k.Name] = k
	}
	// Visit keys in file order (each once, with its last value), so errors name the first
	// bad line a reader meets.
	seen := map[string]bool{}
	for _, e0 := range entries {
		if seen[e0.Key] {
			continue
		}
		seen[e0.Key] = true
		e := last[e0.Key]
		k, known := byName[e.Key]
		if !known {
			if f := fs.Lookup(e.Key); f != nil && !isMeta(e.Key) {
				k = Key{Name: e.Key, Flag: e.Key}
			} else {
				res.Ignored = append(res.Ignored, e.Key)
				continue
			}
		}
		if k.Flag == "" {
			// A key that feeds others; its Map, if any, only validates.
			if k.Map != nil {
				if _, err := k.Map(e.Value, get); err != nil && err != Skip {
					return nil, &KeyError{File: file, Line: e.Line, Key: e.Key, Err: err}
				}
			}
			continue
		}
		f := fs.Lookup(k.Flag)
		if f == nil {
			return nil, fmt.Errorf("config: key %s maps to unknown flag --%s", k.Name, k.Flag)
		}
		if f.Changed {
			continue // the command line wins
		}
		v := e.Value
		if k.Map != nil {
			mv, err := k.Map(v, get)
			if err == Skip {
				continue
			}
			if err != nil {
				return nil, &KeyError{File: file, Line: e.Line, Key: e.Key, Err: err}
			}
			v = mv
		} else if v == "" {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			if k.Secret {
				err = fmt.Errorf("invalid value for --%s", k.Flag)
			}
			return nil, &KeyError{File: file, Line: e.Line, Key: e.Key, Err: err}
		}
		res.From[f.Name] = e
	}
	sort.Strings(res.Ignored)
	return res, nil
}

// isMeta reports the flags a file must not set: the ones that choose the file or what the
// command does with it.
func isMeta(name string) bool {
	return name == "config" || name == "print-config" || name == "help"
}

// Print writes the effective configuration of fs: one line per flag, sorted, under the
// Pulsar key that maps to it one to one (a Key without Map) or else under the flag name;
// secret values (keys marked Secret, and flags named in secretFlags) are masked. The output
// is valid input for Apply with the same keys.
func Print(w io.Writer, fs *pflag.FlagSet, keys []Key, secretFlags ...string) error {
	name := map[string]string{}
	secret := map[string]bool{}
	for _, f := range secretFlags {
		secret[f] = true
	}
	for _, k := range keys {
		if k.Flag == "" {
			continue
		}
		if k.Secret {
			secret[k.Flag] = true
		}
		if k.Map == nil {
			if _, dup := name[k.Flag]; !dup {
				name[k.Flag] = k.Name
			}
		}
	}
	type line struct{ k, v string }
	var lines []line
	fs.VisitAll(func(f *pflag.Flag) {
		if isMeta(f.Name) || f.Hidden {
			return
		}
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		if secret[f.Name] && v != "" {
			v = Masked
		}
		k := f.Name
		if n, ok := name[f.Name]; ok {
			k = n
		}
		lines = append(lines, line{k, v})
	})
	sort.Slice(lines, func(i, j int) bool { return lines[i].k < lines[j].k })
	for _, l := range lines {
		if _, err := fmt.Fprintf(w, "%s=%s\n", l.k, escapeValue(l.v)); err != nil {
			return err
		}
	}
	return nil
}

// escapeValue writes v so that Parse reads it back.
func escapeValue(v string) string {
	r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "\f", `\f`)
	return r.Replace(v)
}
