package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/audit"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Check the console's audit log"}
	verify := &cobra.Command{
		Use:   "verify [--expect-head SEQ:HASH | --expect-min-seq N]",
		Short: "Walk the audit log's keyed chain; print its head; exit 1 naming the first bad row",
		Long: `Walk the audit log's chain, checking every row's sequence, link and HMAC seal (keyed from the
deployment's digest secret), and print the head as "audit head seq=N hash=H". Record that line
outside the database; pass it back as --expect-head N:H to detect the deletion of the newest
rows, which the chain alone cannot show (--expect-min-seq N detects truncation only). With a cell
map (--cells), the chain is the control cell's: every cell's actions are audited there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var opt audit.VerifyOptions
			if v, _ := cmd.Flags().GetString("expect-head"); v != "" {
				h, err := audit.ParseHead(v)
				if err != nil {
					return usagef("--expect-head: %v", err)
				}
				opt.ExpectHead = &h
			}
			if v, _ := cmd.Flags().GetString("expect-min-seq"); v != "" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 1 {
					return usagef("--expect-min-seq: %q is not a positive integer", v)
				}
				opt.MinSeq = n
			}
			d, err := openDatabase(ctx, cmd, true, true)
			if err != nil {
				return err
			}
			defer d.Close()
			secret, err := digestSecret(cmd, d)
			if err != nil {
				return err
			}
			res, err := audit.New(d.DB, secret).Verify(ctx, opt)
			if err != nil {
				return err
			}
			if !res.OK() {
				return fmt.Errorf("audit log broken at row %d: %s (%d rows before it are intact)", res.BadSeq, res.Reason, res.Rows)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "audit log intact: %d rows\n", res.Rows)
			fmt.Fprintf(out, "audit head seq=%d hash=%s\n", res.Head.Seq, res.Head.Hash)
			if res.Unverified != "" {
				fmt.Fprintf(out, "not verified: %s\n", res.Unverified)
			}
			return nil
		},
	}
	verify.Flags().String("expect-head", "", "a head recorded earlier, SEQ:HASH: that row must still be there, unchanged")
	verify.Flags().String("expect-min-seq", "", "a sequence recorded earlier: the chain must reach it (detects truncation only)")
	addCellsFlag(verify.Flags())
	verify.Flags().String("digest-secret", "", "deployment secret (env IDEMOPS_DIGEST_SECRET): the audit log's key is derived from it")
	cmd.AddCommand(verify)
	return cmd
}
