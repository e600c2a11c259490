package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/auth"
)

// permissionCmds are `namespaces|topics grant-permission|revoke-permission|permissions`, as
// pulsar-admin has them. kind is "namespace" or "topic".
func permissionCmds(a *adminClient, kind string) []*cobra.Command {
	check := func(s string) error {
		if kind == "topic" {
			_, err := checkTopic(s)
			return err
		}
		return checkNamespace(s)
	}
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
		if err := check(args[0]); err != nil {
			return err
		}
		grant := a.c.GrantNamespacePermission
		if kind == "topic" {
			grant = a.c.GrantTopicPermission
		}
		if err := grant(cmd.Context(), args[0], role, acts); err != nil {
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
		if err := check(args[0]); err != nil {
			return err
		}
		revoke := a.c.RevokeNamespacePermission
		if kind == "topic" {
			revoke = a.c.RevokeTopicPermission
		}
		if err := revoke(cmd.Context(), args[0], revokeRole); err != nil {
			return err
		}
		return a.done(cmd, "revoked "+revokeRole+" on "+args[0])
	})
	revoke.Flags().StringVar(&revokeRole, "role", "", "the role")
	list := leaf("permissions "+arg, "Show the roles' permissions on a "+kind, 1, func(cmd *cobra.Command, args []string) error {
		if err := check(args[0]); err != nil {
			return err
		}
		perms := a.c.NamespacePermissions
		if kind == "topic" {
			perms = a.c.TopicPermissions
		}
		m, err := perms(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return a.show(cmd, m)
	})
	return []*cobra.Command{grant, revoke, list}
}
