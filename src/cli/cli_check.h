/* cli_check.h - what `kiln check`, `kiln contract` and `kiln explain` share.
 *
 * The contract file format (written by `kiln contract`, compared by `kiln check
 * --contract`) lives in cli_contract.c; its interface rendering is also the "inputs" and
 * "outputs" of `kiln check --json`.
 */
#ifndef KILN_CLI_CLI_CHECK_H
#define KILN_CLI_CLI_CHECK_H

#include <stdbool.h>

#include "core/strbuf.h"
#include "diag/diag.h"
#include "ir/graph.h"

/* Version of the contract file format ("kiln_contract": N). */
#define CLI_CONTRACT_VERSION 1

/* JSON array of the main graph's inputs (initializers excluded) or outputs:
 * [{"name": "x", "dtype": "float32", "shape": ["batch", 3, 224, 224],
 *   "type": "float32[batch, 3, 224, 224]"}]; unknown dims are null, an unknown rank
 * gives "shape": null. */
void cli_io_json(ir_model *model, bool outputs, strbuf *out);

/* Compares the model's interface with a contract file and adds contract-mismatch
 * (errors) and contract-changed (warnings) diagnostics. Returns false when the file
 * cannot be read or is not a valid contract; then *why holds a heap message. */
bool cli_contract_compare(ir_model *model, const char *path, diag_list *diags, char **why);

#endif
