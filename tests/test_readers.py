"""kformer.data.readers and splits: formats, string labels, and one-line errors for bad files."""

from __future__ import annotations

import gzip
import json

import pytest

from kformer.data.readers import read_labelled, read_unlabelled
from kformer.data.splits import stratified_split
from kformer.errors import KformerError


def test_csv_tsv_jsonl_gz_and_folder_give_the_same_rows(tmp_path):
    rows = [("good film, really", "pos"), ("bad\tplot", "neg"), ('said "meh"', "neg")]
    (tmp_path / "a.csv").write_text('text,label\n"good film, really",pos\nbad\tplot,neg\n"said ""meh""",neg\n', encoding="utf-8")
    (tmp_path / "a.tsv").write_text("label\ttext\npos\tgood film, really\nneg\tbad plot\nneg\tsaid \"meh\"\n", encoding="utf-8")
    with gzip.open(tmp_path / "a.jsonl.gz", "wt", encoding="utf-8") as handle:
        for text, label in rows:
            handle.write(json.dumps({"text": text, "label": label}) + "\n")
    for label in ("pos", "neg"):
        (tmp_path / "imdb" / label).mkdir(parents=True)
    (tmp_path / "imdb/pos/1_9.txt").write_text("good film, really", encoding="utf-8")
    (tmp_path / "imdb/neg/2_1.txt").write_text("bad plot", encoding="utf-8")

    csv_rows = read_labelled(tmp_path / "a.csv")
    assert list(zip(csv_rows.texts, csv_rows.labels, strict=True)) == rows
    assert read_labelled(tmp_path / "a.tsv").texts[2] == 'said "meh"'
    assert read_labelled(tmp_path / "a.jsonl.gz").labels == ["pos", "neg", "neg"]
    folder = read_labelled(tmp_path / "imdb")
    assert sorted(zip(folder.labels, folder.texts, strict=True)) == [("neg", "bad plot"), ("pos", "good film, really")]


def test_labels_stay_strings(tmp_path):
    (tmp_path / "n.csv").write_text("text,label\na,01\nb,1\nc,2.0\n", encoding="utf-8")
    (tmp_path / "n.jsonl").write_text('{"text": "a", "label": 1}\n', encoding="utf-8")
    assert read_labelled(tmp_path / "n.csv").labels == ["01", "1", "2.0"]
    assert read_labelled(tmp_path / "n.jsonl").labels == ["1"]


def test_missing_column_names_the_columns_found(tmp_path):
    (tmp_path / "x.csv").write_text("body,category\nhello,a\n", encoding="utf-8")
    with pytest.raises(KformerError, match=r"no column 'text' in x\.csv; columns found: body, category\. Use --text-column"):
        read_labelled(tmp_path / "x.csv")
    with pytest.raises(KformerError, match=r"no column 'label' in x\.csv; columns found: body, category\. Use --label-column"):
        read_labelled(tmp_path / "x.csv", text_column="body")
    assert read_labelled(tmp_path / "x.csv", "body", "category").labels == ["a"]


def test_empty_rows_dropped_with_warning_and_error_when_none_left(tmp_path, capsys):
    (tmp_path / "e.csv").write_text("text,label\n,a\n  ,b\nfine,a\n", encoding="utf-8")
    data = read_labelled(tmp_path / "e.csv")
    assert data.texts == ["fine"] and data.dropped == 2
    assert "dropped 2 of 3 rows" in capsys.readouterr().err
    (tmp_path / "none.csv").write_text("text,label\n,a\n", encoding="utf-8")
    with pytest.raises(KformerError, match="all 1 rows have an empty text or label"):
        read_labelled(tmp_path / "none.csv")
    (tmp_path / "header.csv").write_text("text,label\n", encoding="utf-8")
    with pytest.raises(KformerError, match="has no rows"):
        read_labelled(tmp_path / "header.csv")
    (tmp_path / "zero.csv").write_bytes(b"")
    with pytest.raises(KformerError, match="is empty"):
        read_labelled(tmp_path / "zero.csv")


def test_bad_bytes_and_bad_json_name_the_line(tmp_path):
    (tmp_path / "b.csv").write_bytes(b"text,label\nok,a\nbad \xff byte,b\n")
    with pytest.raises(KformerError, match="line 3 is not valid UTF-8"):
        read_labelled(tmp_path / "b.csv")
    (tmp_path / "b.jsonl").write_text('{"text": "a", "label": "x"}\n{oops\n', encoding="utf-8")
    with pytest.raises(KformerError, match="line 2 is not valid JSON"):
        read_labelled(tmp_path / "b.jsonl")
    (tmp_path / "b.xlsx").write_bytes(b"PK")
    with pytest.raises(KformerError, match="unknown file type '.xlsx'"):
        read_labelled(tmp_path / "b.xlsx")


def test_unlabelled_txt_keeps_every_line(tmp_path):
    (tmp_path / "t.txt").write_text("one\n\nthree\n", encoding="utf-8")
    assert read_unlabelled(tmp_path / "t.txt") == ["one", "", "three"]


def test_stratified_split_is_seeded_and_keeps_every_label():
    labels = ["a"] * 50 + ["b"] * 30 + ["c"] * 2
    keep, held = stratified_split(labels, 0.2, seed=3)
    assert len(held) == 17 and len(keep) == 65  # 10 + 6 + 1 and not set(keep) & set(held)
    assert {labels[i] for i in held} == {"a", "b", "c"} and {labels[i] for i in keep} == {"a", "b", "c"}
    again = stratified_split(labels, 0.2, seed=3)
    assert (again[1] == held).all()
    with pytest.raises(KformerError, match="label 'lonely' has fewer than 2 examples"):
        stratified_split(labels + ["lonely"], 0.2)
