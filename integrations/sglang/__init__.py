"""densegate inside SGLang: the aligned gate as SGLang's prefill delayer (a general plugin)."""
