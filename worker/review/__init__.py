"""Review before apply: apply modes, proposed changes as review items, approve and decline."""
