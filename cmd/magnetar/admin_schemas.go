package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/adminclient"
)

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
	show := func(cmd *cobra.Command, topic string, call func(out any) error) error {
		if _, err := checkTopic(topic); err != nil {
			return err
		}
		var v any
		if err := call(&v); err != nil {
			return err
		}
		return a.show(cmd, v)
	}
	get := leaf("get TOPIC", "Show the latest schema of a topic (or --version N)", 1, func(cmd *cobra.Command, args []string) error {
		return show(cmd, args[0], func(out any) error { return a.c.Schema(cmd.Context(), args[0], version, out) })
	})
	get.Flags().Int64Var(&version, "version", -1, "schema version (default: the latest)")
	list := leaf("list TOPIC", "Show every schema version of a topic", 1, func(cmd *cobra.Command, args []string) error {
		return show(cmd, args[0], func(out any) error { return a.c.Schemas(cmd.Context(), args[0], out) })
	})
	withFile := func(use, short string, send func(c *adminclient.Client, ctx context.Context, topic string, payload, out any) error) *cobra.Command {
		cmd := leaf(use+" TOPIC", short, 1, func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageError{fmt.Errorf("-f/--filename is required")}
			}
			body, err := readSchemaFile(file, typ)
			if err != nil {
				return err
			}
			return show(cmd, args[0], func(out any) error { return send(a.c, cmd.Context(), args[0], body, out) })
		})
		cmd.Flags().StringVarP(&file, "filename", "f", "", "schema payload file ({\"type\",\"schema\",\"properties\"} or an Avro definition)")
		cmd.Flags().StringVar(&typ, "type", "AVRO", "schema type of a file holding only a definition")
		return cmd
	}
	del := leaf("delete TOPIC", "Delete the schema of a topic", 1, func(cmd *cobra.Command, args []string) error {
		return show(cmd, args[0], func(out any) error { return a.c.DeleteSchema(cmd.Context(), args[0], force, out) })
	})
	del.Flags().BoolVar(&force, "force", false, "remove every version (versions start again at 0)")
	target := func(arg string) (adminclient.PolicyTarget, error) {
		if isNamespaceArg(arg) {
			return adminclient.PolicyTarget{Namespace: arg}, checkNamespace(arg)
		}
		_, err := checkTopic(arg)
		return adminclient.PolicyTarget{Topic: arg}, err
	}
	getStrategy := leaf("get-strategy TOPIC|TENANT/NS", "Show the schema compatibility strategy of a topic or namespace", 1,
		func(cmd *cobra.Command, args []string) error {
			t, err := target(args[0])
			if err != nil {
				return err
			}
			var v any
			if err := a.c.SchemaCompatibilityStrategy(cmd.Context(), t, applied, &v); err != nil {
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
			t, err := target(args[0])
			if err != nil {
				return err
			}
			if strings.EqualFold(args[1], "UNDEFINED") && t.Topic != "" {
				err = a.c.RemoveSchemaCompatibilityStrategy(cmd.Context(), t)
			} else {
				err = a.c.SetSchemaCompatibilityStrategy(cmd.Context(), t, strings.ToUpper(args[1]))
			}
			if err != nil {
				return err
			}
			return a.done(cmd, "schema compatibility strategy of "+args[0]+" set to "+strings.ToUpper(args[1]))
		})
	c.AddCommand(get, list, withFile("upload", "Register a schema for a topic", (*adminclient.Client).UploadSchema),
		withFile("compatibility", "Test whether a topic would take a schema", (*adminclient.Client).TestSchemaCompatibility), del, getStrategy, setStrategy)
	return c
}
