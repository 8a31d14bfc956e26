// Package downstream holds the Operations idempotency keys protect: a Registry of
// claim.Operation by name, HTTPOperation — a generic executor for any HTTP downstream,
// configured from a YAML file so a user can point idemops at their own service without writing
// Go — and PaysimCharge, the "payment.charge" operation against the paysim channel simulator.
//
// Every Operation sends the lease's DownstreamKey (derived from the key, the same on every
// retry) so the downstream can deduplicate, and can Lookup the document under that key, which
// the claim logic does before any takeover or retry executes again.
//
// # Config file
//
//	operations:
//	  - name: payment.charge              # the operation part of a key's scope
//	    intent:                           # which request fields carry intent (claim.IntentSpec)
//	      ignore: [description, client_ts]
//	      amount_field: amount_minor
//	      currency_field: currency
//	    key_header: Idempotency-Key       # header carrying the downstream key (default Idempotency-Key)
//	    execute:
//	      method: POST                    # POST (default), PUT or PATCH
//	      url: http://127.0.0.1:8090/charges   # may contain {downstream_key}
//	      key_field: merchant_order_no    # optional: body field set to the downstream key
//	    lookup:
//	      url: http://127.0.0.1:8090/charges/{downstream_key}   # GET; must contain {downstream_key}
//	    statuses:                         # defaults shown
//	      found: [200, 201]
//	      not_found: [404]
//	      failed_final: [400, 402, 403, 409, 422]
//	      failed_retryable: [408, 425, 429, 500, 502, 503, 504]
//	    timeouts: {execute: 10s, lookup: 5s}
//	    response:
//	      resource_id: id                 # dotted path of the resource id in the response JSON
//	      status: status                  # optional dotted path of the document's status
//	      failed_values: [failed]         # status values meaning the document failed (final)
//	      failure_status: 400             # HTTP status replayed for a final failure (default 400)
//	    redrive: false                    # may the daemon execute again after two not-founds?
//
// Execute sends the lease's canonical intent as the JSON body. Its answer is sorted by status:
// found → a Document (a final Failure when response.status is one of failed_values),
// failed_final → a final Failure, anything else (failed_retryable, unlisted, transport errors)
// → ambiguous, so the key becomes failed_retryable and the next attempt looks up first. Lookup
// answers found → a Document, not_found → (nil, nil), anything else → an error.
//
// A bad file is rejected by LoadConfig with one line naming the file, the field and the
// problem: "ops.yaml: operations[0].lookup.url: must contain {downstream_key}".
package downstream
