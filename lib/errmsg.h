/* errmsg: the (char *err, size_t errlen) convention of library calls that report why they
 * failed (prompt, atomfile, safetensors, config, checkpoint): the callee writes one line,
 * lowercase, no full stop, naming the file (and tensor or field); the caller adds "prog: ".
 * err may be NULL or errlen 0, in which case nothing is written. */
#ifndef DICE_ERRMSG_H
#define DICE_ERRMSG_H

#include <stddef.h>

void errmsg_set(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
