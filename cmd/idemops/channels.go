package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/reconcile"
)

// newReconcileChannelCmd manages channel accounts' tenants: whoever holds the database sets
// them (like `idemops user`), audited in the console's log.
func newReconcileChannelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "channel list|set-tenants", Short: "Channel accounts and the tenants they belong to"}
	setTenants := &cobra.Command{
		Use:   "set-tenants CHANNEL TENANT[,TENANT...]",
		Short: `Set the tenants a channel account belongs to ("*": every tenant; only its operators then see it)`,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenants, err := reconcile.NormalizeTenants(strings.Split(args[1], ","))
			if err != nil {
				return usageError{err}
			}
			d, r, err := openReconciler(cmd)
			if err != nil {
				return err
			}
			defer d.Close()
			secret, err := digestSecret(cmd, d) // the change is audited, sealed under its key
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			before, err := r.ChannelTenants(ctx, args[0])
			if err != nil {
				return err
			}
			actor := operatorActor()
			err = d.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				if tenants, err = reconcile.SetChannelTenants(ctx, tx, args[0], tenants, actor); err != nil {
					return err
				}
				return audit.New(d.DB, secret).Append(ctx, tx, audit.Entry{Actor: actor, Action: "reconcile.channel.set_tenants",
					Target: "channel:" + args[0], Tenants: append(append([]string{}, before...), tenants...),
					Detail: map[string]any{"tenants": tenants, "before": before}})
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "channel %s: tenants %s (were %s)\n", args[0], strings.Join(tenants, ","), strings.Join(before, ","))
			return nil
		},
	}
	list := reconListCmd("List channel accounts with their tenants (a channel without tenants is * only)", "channel account",
		(*reconcile.Reconciler).ListChannelAccounts, func(out io.Writer, accounts []reconcile.ChannelAccount) {
			fmt.Fprintf(out, "%-24s %-30s %s\n", "CHANNEL", "TENANTS", "SET BY")
			for _, a := range accounts {
				by := a.UpdatedBy
				if by == "" {
					by = "-"
				}
				fmt.Fprintf(out, "%-24s %-30s %s\n", a.Channel, strings.Join(a.Tenants, ","), by)
			}
		})
	cmd.PersistentFlags().String("digest-secret", "", "deployment secret (env IDEMOPS_DIGEST_SECRET): the audit log's key is derived from it")
	cmd.AddCommand(setTenants, list)
	return cmd
}
