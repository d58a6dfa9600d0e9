/* Imports SQLite, which holds dbxfs's persistent state: the upload journal and the metadata tree. */
#include <sqlite3.h>
