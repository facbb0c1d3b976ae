"""Keys: master keys from providers, the vault keys they wrap, and operations on both.

`providers` load or reach the master key (file, env, OS keyring, AWS KMS, PKCS#11);
`hierarchy` and `keystore` unwrap the vault keys once per process; `rotation`, `admin` and
`upgrade` are the operators' key commands (rotate, retire, rewrap); `version_check` the
decrypt check of every version (`check`, `backup verify`), on every core (`opening`, its
workers); `recovery` the recovery shares.

This package holds the crypto of the keys, never their SQL: the rows it reads and writes
are the store's named operations (`store.vault_keys`, `store.data_keys`,
`store.recovery_keys`), which take and give wrapped bytes; where a write must wrap a key
inside its transaction, the store calls back into code here to do it.

May import: `store` and everything below it.
"""
