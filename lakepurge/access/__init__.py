"""Access requests (GDPR Art. 15): the users' records, through the index, into one encrypted archive."""
