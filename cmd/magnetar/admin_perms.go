package main

import (
	"errors"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/auth"
)

// permissionCmds are `namespaces|topics grant-permission|revoke-permission|permissions`, as
// pulsar-admin has them. kind is "namespace" or "topic"; path maps the argument to its
// REST path ("namespaces/t/ns" or "persistent/t/ns/topic").
func permissionCmds(a *adminClient, kind string, path func(string) (string, error)) []*cobra.Command {
	arg := map[string]string{"namespace": "TENANT/NAMESPACE", "topic": "TOPIC"}[kind]
	var (
		role    string
		actions []string
	)
	grant := leaf("grant-permission "+arg, "Grant a role actions (produce, consume, ...) on a "+kind, 1, func(cmd *cobra.Command, args []string) error {
		if role == "" {
			return usageError{errors.New("--role is required")}
		}
		acts, err := auth.ParseActions(actions)
		if err != nil {
			return usageError{err}
		}
		p, err := path(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "POST", "/admin/v2/"+p+"/permissions/"+url.PathEscape(role), acts, nil); err != nil {
			return err
		}
		return a.done(cmd, "granted "+role+" on "+args[0])
	})
	grant.Flags().StringVar(&role, "role", "", "the role")
	grant.Flags().StringSliceVar(&actions, "actions", nil, "actions: produce, consume, functions, sources, sinks, packages")
	var revokeRole string
	revoke := leaf("revoke-permission "+arg, "Revoke a role's permissions on a "+kind, 1, func(cmd *cobra.Command, args []string) error {
		if revokeRole == "" {
			return usageError{errors.New("--role is required")}
		}
		p, err := path(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "DELETE", "/admin/v2/"+p+"/permissions/"+url.PathEscape(revokeRole), nil, nil); err != nil {
			return err
		}
		return a.done(cmd, "revoked "+revokeRole+" on "+args[0])
	})
	revoke.Flags().StringVar(&revokeRole, "role", "", "the role")
	list := leaf("permissions "+arg, "Show the roles' permissions on a "+kind, 1, func(cmd *cobra.Command, args []string) error {
		p, err := path(args[0])
		if err != nil {
			return err
		}
		var m map[string][]string
		if err := a.do(cmd.Context(), "GET", "/admin/v2/"+p+"/permissions", nil, &m); err != nil {
			return err
		}
		return a.show(cmd, m)
	})
	return []*cobra.Command{grant, revoke, list}
}

func namespacePermPath(s string) (string, error) {
	p, err := namespacePath(s)
	return "namespaces/" + p, err
}

func topicPermPath(s string) (string, error) {
	p, _, err := topicPath(s)
	return p, err
}
