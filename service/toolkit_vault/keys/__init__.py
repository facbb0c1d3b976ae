"""Keys: master keys from providers, the vault keys they wrap, and operations on both.

`providers` load or reach the master key (file, env, OS keyring, AWS KMS, PKCS#11);
`hierarchy` and `keystore` unwrap the vault keys once per process; `rotation`, `admin` and
`upgrade` are the operators' key commands (rotate, retire, rewrap, check).

May import: `store` and everything below it.
"""
