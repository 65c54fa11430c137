#!/usr/bin/env python3
"""Render a Markdown file to HTML as a Markdown reader would (Python-Markdown, with fenced code
blocks and tables), and print the HTML: what a pull request comment or a step summary shows."""
import sys

import markdown

with open(sys.argv[1], encoding="utf-8") as f:
    print(markdown.markdown(f.read(), extensions=["fenced_code", "tables"]))
