"""Table formats lakepurge erases from: where a table's rows are (its log, its live files), and where its history
still holds them (files a commit removed, rows a deletion vector hides, change data, log entries).

Format knowledge only: reading a table's log and files, the table's index entries, the erasure plan. The erasure
itself (rewrites, the commit, history deletion, verification) is in lakepurge.purge.tables. This package imports
only the low-level modules (config, aws, s3io, s3uri, logs, privacy, formats, index.base).
"""
