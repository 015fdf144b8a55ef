/* extract: the code out of a model response (SPEC §4).
 *
 * KernelBench takes the first ``` fenced block of the stripped response (non-greedy, across
 * lines), trims it, and drops a leading language tag. We do the same: the opening fence's
 * info string (python, py, cpp, c++, cuda, ...) is removed, the block ends at the next ```,
 * and an unclosed fence is no code (NULL), as in KernelBench.
 */
#ifndef DICE_EXTRACT_H
#define DICE_EXTRACT_H

#include <stddef.h>
#include <jansson.h>

/* New string (caller frees) or NULL when the text holds no complete fenced block. */
char *extract_code(const char *text, size_t len);

/* The kernel of a record: the string field `field` when given (its code block, extracted as
 * from `completion`, when a line of it opens with a ``` fence; else all of it, ``` inside a
 * line of code too); else `kernel` (absent or
 * null: not there); else the code extracted from `completion`. New string or NULL; *from
 * (if not NULL) names the field used ("kernel", "completion" or field; a `kernel` of another
 * type is used, and gives NULL), or NULL when none was present. */
char *extract_record_kernel(const json_t *rec, const char *field, const char **from);
/* Why extract_record_kernel gave NULL, from its *from: "no string field 'F'", "no kernel:
 * neither 'kernel' nor 'completion' is a string", "'kernel' is not a string" or "no fenced
 * code block in 'completion'" (or in the field), written to buf (n bytes). Returns buf. */
const char *extract_record_why(const json_t *rec, const char *field, const char *from,
                               char *buf, size_t n);

#endif
