/* Imports libfuse3's low-level API into Swift.
 * FUSE_USE_VERSION must be set before the include (fuse_lowlevel.h stops with #error otherwise).
 * Function-like macros are invisible to Swift, so each one we need gets a static inline twin here. */
#ifndef DBXFS_CFUSE_SHIM_H
#define DBXFS_CFUSE_SHIM_H
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#endif
