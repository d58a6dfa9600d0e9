/* Imports the parts of OpenSSL's libcrypto dbxfs uses: SHA-256 (EVP) and RAND_bytes. */
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
