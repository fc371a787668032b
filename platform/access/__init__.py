"""Who may do what: API tokens and their scopes, the acting principal, the audit trail."""
