package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/config"
)

// withConfig gives c the --config FILE and --print-config flags: before c runs, the file's
// Pulsar keys (keys) and flag-named keys set every flag the command line did not; the keys
// Magnetar has no setting for are logged once; --print-config prints the effective
// configuration (secrets masked: keys marked Secret and secretFlags) instead of running.
// A value a flag refuses exits 2 naming the key and its line, and so does a later usage
// error about a flag the file set.
func withConfig(c *cobra.Command, keys []config.Key, secretFlags ...string) *cobra.Command {
	var (
		path  string
		print bool
	)
	c.Flags().StringVar(&path, "config", "", "Pulsar-style configuration file (key=value; flags override it)")
	c.Flags().BoolVar(&print, "print-config", false, "print the effective configuration (secrets masked) and exit")
	run := c.RunE
	c.RunE = func(cmd *cobra.Command, args []string) error {
		res, err := applyConfig(cmd, path, keys)
		if err != nil {
			return err
		}
		if print {
			return config.Print(cmd.OutOrStdout(), cmd.Flags(), keys, secretFlags...)
		}
		if res != nil && len(res.Ignored) > 0 {
			if f := cmd.Flags().Lookup("log-level"); f != nil {
				if err := setupLogging(f.Value.String()); err != nil {
					return err
				}
			}
			slog.Warn("config: ignoring keys Magnetar has no setting for", "file", path,
				"keys", strings.Join(res.Ignored, ","))
		}
		err = run(cmd, args)
		var ue usageError
		if res != nil && errors.As(err, &ue) {
			err = usageError{nameKeys(ue.err, res, path)}
		}
		return err
	}
	return c
}

// applyConfig applies the file at path (if any) to cmd's flags.
func applyConfig(cmd *cobra.Command, path string, keys []config.Key) (*config.Result, error) {
	if path == "" {
		return nil, nil
	}
	es, err := config.Load(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--config: %w", err)}
	}
	res, err := config.Apply(cmd.Flags(), path, es, keys)
	if err != nil {
		return nil, usageError{err}
	}
	if len(res.Ignored) > 0 {
		slog.Debug("config: ignoring keys Magnetar has no setting for", "file", path, "keys", strings.Join(res.Ignored, ","))
	}
	return res, nil
}

// nameKeys adds to a usage error that names a flag the file set which key and line set it.
func nameKeys(err error, res *config.Result, path string) error {
	msg := err.Error()
	var from []string
	for flag, e := range res.From {
		if strings.Contains(msg, "--"+flag) {
			from = append(from, fmt.Sprintf("--%s from key %s (%s:%d)", flag, e.Key, path, e.Line))
		}
	}
	if len(from) == 0 {
		return err
	}
	return fmt.Errorf("%w [%s]", err, strings.Join(from, "; "))
}

// Config key maps shared by the roles.

// portOn maps a Pulsar port key to a host:port flag, the host taken from hostKey (default
// defHost). An empty port turns the listener off only where off is allowed.
func portOn(hostKey, defHost string, offAllowed bool) func(string, func(string) (string, bool)) (string, error) {
	return func(v string, get func(string) (string, bool)) (string, error) {
		if v == "" {
			if offAllowed {
				return "", nil
			}
			return "", config.Skip
		}
		if err := checkPort(v); err != nil {
			return "", err
		}
		h, _ := get(hostKey)
		if h == "" {
			h = defHost
		}
		return net.JoinHostPort(h, v), nil
	}
}

// advertisedOn maps Pulsar's advertisedAddress (a host) to a host:port flag with the port
// of portKey (default defPort).
func advertisedOn(portKey, defPort string) func(string, func(string) (string, bool)) (string, error) {
	return func(v string, get func(string) (string, bool)) (string, error) {
		if v == "" {
			return "", config.Skip
		}
		p, _ := get(portKey)
		if p == "" {
			p = defPort
		}
		if err := checkPort(p); err != nil {
			return "", fmt.Errorf("%s: %w", portKey, err)
		}
		return net.JoinHostPort(v, p), nil
	}
}

func checkPort(v string) error {
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
		return errors.New("want a port number 0-65535")
	}
	return nil
}

// etcdURL maps Pulsar's metadata store URLs (metadataStoreUrl "etcd:http://h:p,http://h2:p",
// bookkeeper's metadataServiceUri "metadata-store:etcd:http://h:p") to --metadata-url.
func etcdURL(v string, _ func(string) (string, bool)) (string, error) {
	if v == "" {
		return "", config.Skip
	}
	if strings.HasPrefix(v, "etcd://") {
		return v, nil
	}
	s, ok := strings.CutPrefix(strings.TrimPrefix(v, "metadata-store:"), "etcd:")
	if !ok {
		return "", errors.New("want etcd:http://host:port[,http://host:port...] (Magnetar's metadata store is etcd)")
	}
	var hps []string
	for _, ep := range strings.Split(s, ",") {
		ep = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(ep), "http://"), "https://")
		ep, _, _ = strings.Cut(ep, "/")
		if ep == "" {
			return "", errors.New("empty etcd endpoint")
		}
		hps = append(hps, ep)
	}
	return "etcd://" + strings.Join(hps, ","), nil
}

// etcdURLOrSkip is etcdURL for an etcd URL and leaves the flag unset for any other store
// (standalone's configurationMetadataStoreUrl: Pulsar's own store is the embedded etcd).
func etcdURLOrSkip(v string, get func(string) (string, bool)) (string, error) {
	if !strings.HasPrefix(v, "etcd:") && !strings.HasPrefix(v, "metadata-store:etcd:") {
		return "", config.Skip
	}
	return etcdURL(v, get)
}

// only accepts just want for a key whose setting is fixed in this role.
func only(want, why string) func(string, func(string) (string, bool)) (string, error) {
	return func(v string, _ func(string) (string, bool)) (string, error) {
		if v != "" && v != want {
			return "", fmt.Errorf("want %s: %s", want, why)
		}
		return "", config.Skip
	}
}
