"""``lakepurge export``: GDPR Art. 15, a copy of the users' records in one encrypted archive with a time-limited link
(lakepurge.access.export); ``--link`` signs a new link to an archive, ``--open`` decrypts a delivered one."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import orjson

from lakepurge.cli.arguments import (
    Commands,
    Output,
    add_no_expand,
    add_users,
    read_lake_settings,
    read_settings,
    read_typed_ids,
    read_users,
    with_typed_ids,
)
from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, CliError, check_aws_environment
from lakepurge.core.s3uri import S3Uri

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def register(commands: Commands) -> None:
    export = commands.add(
        "export", cmd_export, help="a copy of the users' records (GDPR Art. 15): encrypted archive, link"
    )
    add_users(export)
    add_no_expand(export)
    export.add_argument("--to", metavar="S3URI", help="s3://bucket/prefix/ for the archive (not the lake)")
    export.add_argument(
        "--open",
        metavar="ARCHIVE",
        help="instead: decrypt a delivered archive (s3:// URI or file; needs kms:Decrypt on its key) into --out,"
        " once its export record shows it is the archive of --request-id (default: its name, <id>.zip.enc)",
    )
    export.add_argument(
        "--link",
        metavar="REQUEST_ID",
        help="instead: a new link to that request's archive, signed with your credentials (--expires-days)",
    )
    export.add_argument("--out", metavar="DIR", help="with --open: the folder the archive's files are written to")
    export.add_argument(
        "--format",
        choices=("original", "jsonl", "csv"),
        default="original",
        help="original (default): each dataset's own format; jsonl or csv: records converted",
    )
    export.add_argument("--request-id", help="names the archive and the record exports/<id>.json (default: new)")
    export.add_argument(
        "--retention-days",
        type=int,
        help="days the archive is kept; older archives under --to are deleted"
        " (default: [workflow] export_retention_days, 30)",
    )
    export.add_argument("--kms-key", help="KMS key of the archive's data key (default: [workflow] kms_key_id)")
    export.add_argument(
        "--expires-days", type=float, default=7.0, help="lifetime of the link, at most 7 days (default: %(default)s)"
    )


def cmd_export(args: argparse.Namespace, out: Output) -> int:
    """GDPR Art. 15: a copy of the users' records, one encrypted archive, a time-limited link (access.export)."""
    from lakepurge.access.export import (
        DEFAULT_RETENTION_DAYS,
        ExportExpansionRefused,
        ExportFailed,
        ExportRefused,
        export_users,
    )

    if args.open is not None:
        return _open_export(args, out)
    if args.link is not None:
        return _export_link(args, out)
    if args.to is None:
        raise CliError("usage", "--to s3://bucket/prefix/ is needed to export (or --open ARCHIVE --out DIR)")
    users = read_users(args)
    try:
        to = S3Uri.parse(args.to)
    except ValueError:
        raise CliError("usage", "--to takes an s3://bucket/prefix/ URI") from None
    settings = read_lake_settings(args)
    users = with_typed_ids(args, settings, users)
    retention = args.retention_days or (
        settings.workflow.export_retention_days if settings.workflow is not None else DEFAULT_RETENTION_DAYS
    )
    try:
        run = export_users(
            settings,
            users,
            to,
            fmt=args.format,
            request_id=args.request_id,
            kms_key=args.kms_key,
            expires_seconds=round(args.expires_days * 86400),
            say=out.say,
            retention_days=retention,
            no_expand=read_typed_ids(args, settings, "no_expand"),
        )
    except ExportRefused as exc:
        code = EXIT_REFUSED if isinstance(exc, ExportExpansionRefused) else EXIT_USAGE
        raise CliError("export_refused", f"export refused, nothing read or written: {exc}", code) from None
    except ExportFailed as exc:
        raise CliError("export_failed", f"export failed, nothing written: {exc}", EXIT_FAILED) from None
    out.result(run.summary())
    return EXIT_OK


def _export_link(args: argparse.Namespace, out: Output) -> int:
    """``export --link REQUEST_ID``: a new link to an exported archive, signed with this process's credentials (an
    IAM user's long-term keys make a link of up to 7 days; temporary ones end it with their session)."""
    from datetime import datetime

    from lakepurge.access.export import LINK_LIMITS, presigned_link
    from lakepurge.core import aws
    from lakepurge.reports import layout

    settings = read_settings(args)
    check_aws_environment()
    where = layout.export_record(settings, args.link)
    record = layout.read_document(aws.client("s3"), where, layout.ExportDocument)
    if record is None:
        raise CliError("export_refused", f"request {args.link} has no export record ({where})")
    expiry = datetime.fromisoformat(record.archive_expires_at) if record.archive_expires_at else None
    if expiry is not None and expiry <= datetime.now(expiry.tzinfo):
        raise CliError("export_refused", f"the archive of request {args.link} expired at {record.archive_expires_at}")
    link = presigned_link(S3Uri.parse(record.archive), round(args.expires_days * 86400), not_after=expiry)
    out.say(f"link to {record.archive}, valid until {link.expires_at.isoformat()}{LINK_LIMITS[link.limited_by]}:")
    out.say(f"  {link.url}")
    out.result(
        {
            "request_id": args.link,
            "archive": record.archive,
            "link": link.url,
            "link_expires_at": link.expires_at.isoformat(),
            "link_limited_by": link.limited_by,
        }
    )
    return EXIT_OK


def _open_export(args: argparse.Namespace, out: Output) -> int:
    """``export --open ARCHIVE --out DIR``: decrypt a delivered archive (s3:// URI or local file; needs kms:Decrypt
    on its key under its context) and unpack it into DIR, once it is shown to be the archive of the request it is
    opened as (``--request-id``, else the archive's name ``<request id>.zip.enc``): its export record names these
    bytes. Only that request's users' records are in it."""
    import io
    import zipfile
    from pathlib import Path, PurePosixPath

    from lakepurge.access.export import ARCHIVE_SUFFIX, ExportRefused, open_archive
    from lakepurge.core import aws

    if args.out is None:
        raise CliError("usage", "--open needs --out DIR, where the archive's files are written")
    name = args.open.rsplit("/", 1)[-1]
    request_id = args.request_id or (name.removesuffix(ARCHIVE_SUFFIX) if name.endswith(ARCHIVE_SUFFIX) else None)
    if not request_id:
        raise CliError("usage", f"--open {args.open}: name the request it is the archive of with --request-id ID")
    settings = read_settings(args)
    s3: S3Client = aws.client("s3")
    if args.open.startswith("s3://"):
        location = S3Uri.parse(args.open)
        sealed = s3.get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    else:
        try:
            sealed = Path(args.open).read_bytes()
        except OSError as exc:
            raise CliError("usage", f"--open {args.open}: {exc.strerror}") from None
    try:
        plaintext = open_archive(settings, s3, aws.client("kms"), sealed, request_id)
    except ValueError as exc:
        raise CliError("usage", f"--open {args.open}: {exc}") from None
    except ExportRefused as exc:
        raise CliError("export_refused", f"--open {args.open}: refused, nothing written: {exc}") from None
    target = Path(args.out)
    with zipfile.ZipFile(io.BytesIO(plaintext)) as archive:
        names = archive.namelist()
        for name in names:
            relative = PurePosixPath(name)
            if relative.is_absolute() or ".." in relative.parts:
                raise CliError("usage", f"--open {args.open}: the archive names a file outside its folder")
        target.mkdir(parents=True, exist_ok=True)
        archive.extractall(target)
    manifest = orjson.loads((target / "manifest.json").read_bytes()) if "manifest.json" in names else {}
    out.result(
        {
            "archive": args.open,
            "out": str(target),
            "files": len(names),
            "request_id": manifest.get("request_id"),
            "objects": len(manifest.get("objects", [])),
        }
    )
    return EXIT_OK
