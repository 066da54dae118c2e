"""How a participant or an operator gets its identity: join tokens, the coordinator's CA and TLS
material, operator credentials.
"""
