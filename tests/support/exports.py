"""Reading what an access export wrote: its sealed archive, and a KMS key on moto to seal it with."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from lakepurge.access.sealing import unseal
from lakepurge.core.aws import client
from lakepurge.core.s3uri import S3Uri


def open_archive(s3: Any, uri: str) -> tuple[dict[str, Any], zipfile.ZipFile]:
    location = S3Uri.parse(uri)
    sealed = s3.get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    archive = zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(sealed), client("kms"))))
    return json.loads(archive.read("manifest.json")), archive


def kms_key() -> str:
    return client("kms").create_key(Description="exports")["KeyMetadata"]["KeyId"]
