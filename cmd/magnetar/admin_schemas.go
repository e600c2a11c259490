package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// schemaPath is the /admin/v2/schemas path of a topic's schema resource.
func schemaPath(topic, suffix string) (string, error) {
	p, n, err := topicPath(topic)
	if err != nil {
		return "", err
	}
	return "/admin/v2/schemas/" + strings.TrimPrefix(p, n.Domain+"/") + suffix, nil
}

// readSchemaFile reads a schema payload file as pulsar-admin's --filename takes it:
// {"type": "AVRO", "schema": "<definition>", "properties": {...}}; a file holding only an
// Avro definition (a JSON object with "fields") is sent as an AVRO schema.
func readSchemaFile(name, typ string) (map[string]any, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, usageError{err}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, usageError{fmt.Errorf("%s: %v", name, err)}
	}
	if _, ok := m["schema"]; ok {
		return m, nil
	}
	return map[string]any{"type": typ, "schema": string(b), "properties": map[string]string{}}, nil
}

// isNamespaceArg reports whether s names a namespace (tenant/ns) rather than a topic.
func isNamespaceArg(s string) bool {
	return !strings.Contains(s, "://") && strings.Count(s, "/") == 1
}

func newAdminSchemasCmd(a *adminClient) *cobra.Command {
	c := group("schemas", "Show, upload, delete and test the schemas of topics; compatibility strategies")
	var version int64
	var file, typ string
	var force, applied bool
	showPath := func(cmd *cobra.Command, method, path string, body any) error {
		var v any
		if err := a.do(cmd.Context(), method, path, body, &v); err != nil {
			return err
		}
		return a.show(cmd, v)
	}
	get := leaf("get TOPIC", "Show the latest schema of a topic (or --version N)", 1, func(cmd *cobra.Command, args []string) error {
		suffix := "/schema"
		if version >= 0 {
			suffix = fmt.Sprintf("/schema/%d", version)
		}
		p, err := schemaPath(args[0], suffix)
		if err != nil {
			return err
		}
		return showPath(cmd, "GET", p, nil)
	})
	get.Flags().Int64Var(&version, "version", -1, "schema version (default: the latest)")
	list := leaf("list TOPIC", "Show every schema version of a topic", 1, func(cmd *cobra.Command, args []string) error {
		p, err := schemaPath(args[0], "/schemas")
		if err != nil {
			return err
		}
		return showPath(cmd, "GET", p, nil)
	})
	withFile := func(use, short, suffix string) *cobra.Command {
		cmd := leaf(use+" TOPIC", short, 1, func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageError{fmt.Errorf("-f/--filename is required")}
			}
			body, err := readSchemaFile(file, typ)
			if err != nil {
				return err
			}
			p, err := schemaPath(args[0], suffix)
			if err != nil {
				return err
			}
			return showPath(cmd, "POST", p, body)
		})
		cmd.Flags().StringVarP(&file, "filename", "f", "", "schema payload file ({\"type\",\"schema\",\"properties\"} or an Avro definition)")
		cmd.Flags().StringVar(&typ, "type", "AVRO", "schema type of a file holding only a definition")
		return cmd
	}
	del := leaf("delete TOPIC", "Delete the schema of a topic", 1, func(cmd *cobra.Command, args []string) error {
		p, err := schemaPath(args[0], fmt.Sprintf("/schema?force=%t", force))
		if err != nil {
			return err
		}
		return showPath(cmd, "DELETE", p, nil)
	})
	del.Flags().BoolVar(&force, "force", false, "remove every version (versions start again at 0)")
	strategyPath := func(arg string) (string, error) {
		if isNamespaceArg(arg) {
			p, err := namespacePath(arg)
			return "/admin/v2/namespaces/" + p + "/schemaCompatibilityStrategy", err
		}
		p, _, err := topicPath(arg)
		return "/admin/v2/" + p + "/schemaCompatibilityStrategy", err
	}
	getStrategy := leaf("get-strategy TOPIC|TENANT/NS", "Show the schema compatibility strategy of a topic or namespace", 1,
		func(cmd *cobra.Command, args []string) error {
			p, err := strategyPath(args[0])
			if err != nil {
				return err
			}
			if applied && !isNamespaceArg(args[0]) {
				p += "?applied=true"
			}
			var v any
			if err := a.do(cmd.Context(), "GET", p, nil, &v); err != nil {
				return err
			}
			if s, ok := v.(string); ok && !a.out.json() {
				fmt.Fprintln(cmd.OutOrStdout(), s)
				return nil
			}
			return a.show(cmd, v)
		})
	getStrategy.Flags().BoolVar(&applied, "applied", false, "for a topic: the strategy in force (topic, namespace or broker)")
	setStrategy := leaf("set-strategy TOPIC|TENANT/NS STRATEGY",
		"Set the schema compatibility strategy (ALWAYS_COMPATIBLE, ALWAYS_INCOMPATIBLE, BACKWARD, FORWARD, FULL, "+
			"BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, FULL_TRANSITIVE; a topic also takes UNDEFINED to remove its own)", 2,
		func(cmd *cobra.Command, args []string) error {
			p, err := strategyPath(args[0])
			if err != nil {
				return err
			}
			method, body := "PUT", any(strings.ToUpper(args[1]))
			if strings.EqualFold(args[1], "UNDEFINED") && !isNamespaceArg(args[0]) {
				method, body = "DELETE", nil
			}
			if err := a.do(cmd.Context(), method, p, body, nil); err != nil {
				return err
			}
			return a.done(cmd, "schema compatibility strategy of "+args[0]+" set to "+strings.ToUpper(args[1]))
		})
	c.AddCommand(get, list, withFile("upload", "Register a schema for a topic", "/schema"),
		withFile("compatibility", "Test whether a topic would take a schema", "/compatibility"), del, getStrategy, setStrategy)
	return c
}
